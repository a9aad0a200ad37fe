"""ntops.torch's compilation settings. In a prebuilt wheel, warps, stages and tile
configurations were chosen when `ntops-aot build` compiled the kernels, so these
functions check a setting against the build instead of changing anything: asking for
what the wheel was built with succeeds, asking for anything else raises NotBuiltError
with the build command that would give it. Nothing is silently ignored."""

from ._errors import NotBuiltError, rebuild
from ._manifest import manifest


def _check(option, value, flag):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"set_default_{option}: expected a positive int, not {value!r}")
    built = manifest()["build"].get(option)
    if built == value:
        return
    kernels = [k for variant in manifest()["variants"] for k in variant["kernels"]]
    used = sorted({k.get(option, 1) for k in kernels})
    how = (
        f"with {option}={built}"
        if built
        else f"with each kernel's own {option} ({', '.join(map(str, used))})"
    )
    raise NotBuiltError(
        f"ntops_prebuilt.set_default_{option}({value}): prebuilt kernels cannot change {option} "
        f"at run time; this wheel was built {how}. Build one with {option}={value}: "
        f"{rebuild(manifest(), {flag: str(value)})}"
    )


def set_default_num_warps(num_warps):
    """Check that the wheel was built with `ntops-aot build --num-warps num_warps`."""
    _check("num_warps", num_warps, "--num-warps")


def set_default_num_stages(num_stages):
    """Check that the wheel was built with `ntops-aot build --num-stages num_stages`."""
    _check("num_stages", num_stages, "--num-stages")


def set_default_max_num_configs(max_num_configs):
    """ntops.torch caps how many tile configurations it autotunes over. Every prebuilt
    kernel holds exactly one configuration, chosen when the wheel was built, so any
    cap of at least one already holds; a cap below one is an error."""
    if (
        not isinstance(max_num_configs, int)
        or isinstance(max_num_configs, bool)
        or max_num_configs < 1
    ):
        raise ValueError(
            f"set_default_max_num_configs: expected a positive int, not {max_num_configs!r}"
        )
