"""What this wheel holds: manifest.json, written by `ntops-aot build`."""

import functools
import importlib.resources
import json


@functools.cache
def manifest():
    """The build's manifest: arches, ops, variants with their kernels, toolchain versions."""
    text = importlib.resources.files("ntops_prebuilt").joinpath("manifest.json").read_text()
    return json.loads(text)
