"""`ntops-aot`: parse, call ntops_aot.aot, print. Options are layered by aot/config.py
(command line > NTOPS_AOT_* > [tool.ntops-aot] > defaults); each kind of failure
exits with its own code (aot/errors.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import sys
import zipfile
from collections.abc import Callable
from typing import Any

import click

from ..aot import config
from ..aot.build import BuildResult, build
from ..aot.errors import BuildError, NotAWheel
from ..aot.merge import merge
from ..aot.package.stage import ptx_kernels
from ..aot.plan.stage import plan
from .progress import Progress, duration
from .report import describe_wheel

INTERRUPTED = 130


def _reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BuildError as error:
            click.echo(f"ntops-aot: error: {error}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("ntops-aot: interrupted; finished variants are cached", err=True)
            sys.exit(INTERRUPTED)

    return wrapper


def _help(name: str, help: str) -> str:
    """An option's help, with its default and environment variable from config.OPTIONS."""
    default = config.OPTIONS[name].help_default
    shown = f" [default: {default}]" if default is not None else ""
    return f"{help}{shown} [env {config.env_name(name)}]"


def _option(name: str, help: str, **kwargs: Any) -> Callable[..., Any]:
    """An option whose default comes from the layers below the command line."""
    return click.option(f"--{name}", default=None, help=_help(name, help), **kwargs)


def _flag(name: str, help: str) -> Callable[..., Any]:
    return click.option(f"--{name}/--no-{name}", default=None, help=_help(name, help))


_SELECTION = [
    _option("arch", "Arches, comma-separated (sm_80,sm_90) or 'all'."),
    _option("ops", "Ops: names or globs ('soft*'), comma-separated, or 'all'."),
    _option("dtypes", "Only these dtypes (fp16,bf16,fp32)."),
    _option("ndims", "Only these ndims (1,2,3)."),
    _option("variants", "Only variant ids matching these globs ('rms_norm-sm_90-*')."),
    _option("shard", "Only the K-th of N deterministic shards of the variants (K/N)."),
    _option("build-dir", "Generated sources and cubins."),
    _option("cache-dir", "The build cache."),
    _option("tuning-dir", "Tuning tables, ARCH.json each."),
    _flag("tuning", "Build each bucket's winner from the tuning tables."),
]
_FOLDERS = [_option("out", "Where wheels (or the shard file) go.")]
_BUILD = [
    _option("jobs", "Parallel compile processes."),
    _option("timeout", "Seconds one variant may compile ('none': no limit)."),
    _option("max-memory", "MiB one compile process may use ('none')."),
    _flag("keep-going", "Package what compiled; list failed variants in the manifest."),
    _flag("wheel-per-arch", "Also write one wheel per arch (version +sm90 etc.)."),
    _flag(
        "ptx",
        "Also ship the PTX of the newest sm_80/86/89 built, for GPUs no cubin runs on: "
        "the CUDA driver JIT-compiles it at first use (with a warning).",
    ),
    _option("num-warps", "Warps of every kernel."),
    _option("num-stages", "Pipeline stages of every kernel."),
    _option("max-num-configs", "Cap on tile configurations per variant (files declare one)."),
]


def _options(*groups: list[Callable[..., Any]]) -> Callable[..., Any]:
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for group in reversed(groups):
            for option in reversed(group):
                command = option(command)
        return command

    return decorate


def _resolve(values: dict[str, Any]) -> config.BuildOptions:
    return config.resolve({name.replace("_", "-"): value for name, value in values.items()})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ntops-aot", prog_name="ntops-aot")
def main() -> None:
    """Build ninetoothed kernels ahead of time into a zero-JIT, torch-compatible wheel."""


@main.command("build")
@_options(_SELECTION, _FOLDERS, _BUILD)
@_reports_errors
def build_command(**values: Any) -> None:
    """Compile every selected variant (the cache permitting) and write the wheel."""
    options = _resolve(values)
    result = _build(options)
    if options.ptx:
        _warn_ptx(result)
    sys.exit(result.exit_code)


def _build(options: config.BuildOptions) -> BuildResult:
    """Build with a progress display, and print what was written."""
    progress = Progress()
    try:
        result = build(options, progress)
    finally:
        progress.finish()
    _summary(result)
    return result


def _warn_ptx(result: BuildResult) -> None:
    shipped = ptx_kernels(result.kernels)
    if not shipped:
        click.echo(
            "ntops-aot: warning: --ptx shipped no PTX: the PTX of sm_90a, sm_100a and sm_120a "
            "runs only where their cubins do; add sm_80, sm_86 or sm_89 to --arch for PTX "
            "that newer GPUs can compile",
            err=True,
        )
        return
    arch = shipped[0].variant.arch
    click.echo(
        f"ntops-aot: warning: --ptx: the wheel carries {arch} PTX ({len(shipped)} kernels). On "
        "a GPU none of its cubins runs on, the CUDA driver JIT-compiles it at first use: "
        "seconds per kernel, in every new process the driver's JIT cache does not cover, "
        "and code tuned for an older GPU. Build cubins for the GPUs you serve.",
        err=True,
    )


@main.command()
@_options(_SELECTION, _FOLDERS, _BUILD)
@_reports_errors
def tune(**values: Any) -> None:
    """Build a tuning wheel: every candidate configuration of the selected ops that
    declare a TUNING. Install it on a GPU machine next to torch and run
    `python -m ntops_prebuilt.tune --out ARCH.json`; commit the table as
    kernels/tuning/ARCH.json and `ntops-aot build` compiles its winners."""
    result = _build(dataclasses.replace(_resolve(values), candidates=True))
    arches = ",".join(dict.fromkeys(v.arch for v in result.variants))
    click.echo(
        f"next, on a GPU machine of {arches} with torch: pip install {result.wheel.name} && "
        f"python -m ntops_prebuilt.tune --out {arches.split(',')[0]}.json; then copy the "
        "table into kernels/tuning/ and rebuild"
    )
    sys.exit(result.exit_code)


@main.command("list")
@_options(_SELECTION)
@_reports_errors
def list_(**values: Any) -> None:
    """Print the selected variant ids, one a line, without building."""
    for variant in plan(_resolve(values)).variants:
        click.echo(variant.id)


@main.command("merge")
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=pathlib.Path))
@_options(_FOLDERS, [_option("build-dir", "Generated sources."), _option("cache-dir", "Cache.")])
@_options([_BUILD[3], _BUILD[4], _SELECTION[-2], _SELECTION[-1]])
@_reports_errors
def merge_command(shards: tuple[pathlib.Path, ...], **values: Any) -> None:
    """Join the shard files of `build --shard K/N` into the wheel one build writes."""
    result = merge(shards, _resolve(values))
    _summary(result)
    sys.exit(result.exit_code)


@main.command()
@click.argument("wheel", type=click.Path(path_type=pathlib.Path))
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
@_reports_errors
def inspect(wheel: pathlib.Path, as_json: bool) -> None:
    """Print what a built wheel holds: arches, ops, variants, toolchain, sizes."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            manifest = json.loads(archive.read("ntops_prebuilt/manifest.json"))
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise NotAWheel(f"{wheel}: not an ntops_prebuilt wheel ({error})") from error
    if as_json:
        click.echo(json.dumps(manifest, indent=1, sort_keys=True))
    else:
        click.echo(describe_wheel(wheel, manifest, sizes))


def _summary(result: BuildResult) -> None:
    cached = len(result.variants) - result.compiled - len(result.failures)
    failed = f", {len(result.failures)} FAILED" if result.failures else ""
    first, *others = result.outputs
    click.echo(
        f"{first}: {len(result.variants)} variants ({result.compiled} compiled, {cached} "
        f"cached{failed}), {len(result.kernels)} kernels, {first.stat().st_size / 1e6:.1f} MB, "
        f"{duration(result.seconds)} ({result.seconds:.1f} s)"
    )
    for path in others:
        click.echo(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
    for failure in result.failures:
        click.echo(f"missing from the wheel: {failure.describe()}", err=True)


if __name__ == "__main__":
    main()
