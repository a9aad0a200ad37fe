"""Errors for calls this wheel has no kernel for: what was asked, what the wheel has,
and the `ntops-aot build` command that would add it."""

import shlex

from ._manifest import manifest


class NotBuiltError(RuntimeError):
    """This wheel holds no prebuilt kernel for the call (arch, dtype, ndim or op)."""


def not_built(group, capability, dtype, ndim):
    """Called by the launcher: the exception to raise for `group` on this call."""
    built = manifest()
    op, function, switches = next(
        (name, function, keys[group])
        for name, info in built["ops"].items()
        for function, keys in [(name, info["groups"]), *info["functions"].items()]
        if group in keys
    )
    space = built["ops"][op]
    group = next(key for key, values in space["groups"].items() if values == switches)
    shorts = {torch_name: short for short, torch_name in built["dtypes"].items()}
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else None
    dtype_short = shorts.get(dtype_name)
    arch = f"sm_{capability}" if capability >= 0 else None
    asked = [f"arch {arch}"] if arch else []
    asked += [f"dtype {dtype_name}"] if dtype_name else []
    asked += [f"{ndim} dim{'s' if ndim > 1 else ''} after merging contiguous dims"] if ndim else []
    name = f"{function}{_switches(switches)}"
    details = f" ({', '.join(asked)})" if asked else ""
    lines = [f"ntops_prebuilt.{name}: no prebuilt kernel for this call{details}."]

    failed = _failed(built, group, capability, dtype_short)
    if failed:
        lines.append(
            "The wheel was built with --keep-going and these variants failed to compile: "
            + "; ".join(f"{f['id']} ({f['kind']}: {f['error'].splitlines()[-1]})" for f in failed)
            + ". Fix them and rebuild."
        )
        return NotBuiltError("\n".join(lines))
    mine = [v for v in built["variants"] if v["group"] == group and v["kernels"]]
    if not mine:
        ops = sorted({v["op"] for v in built["variants"] if v["kernels"]})
        lines.append(f"This wheel has no {function} kernels; it has {', '.join(ops) or 'none'}.")
    else:
        lines.append(
            f"This wheel has {function} for arches {_listed(v['arch'] for v in mine)}; "
            f"dtypes {_listed(v['dtype'] for v in mine)}; ndims {_listed(v['ndim'] for v in mine)}."
        )
    if dtype_name and dtype_short not in space["dtypes"]:
        lines.append(
            f"{function} takes {', '.join(space['dtypes'])} only: convert the input, "
            f"e.g. with .to(torch.{built['dtypes'][space['dtypes'][-1]]})."
        )
    elif ndim and ndim > max(space["ndims"]):
        lines.append(
            f"{function} kernels take at most {max(space['ndims'])} dims: make the tensors "
            "contiguous (.contiguous()) so that their dims merge."
        )
    elif arch and space.get("arches") and arch not in space["arches"]:
        lines.append(
            f"{function} is built for {', '.join(space['arches'])} only: "
            f"{space['arches_note']}; this GPU is {arch}."
        )
    elif arch and arch not in built.get("targets", [arch]):
        lines.append(
            f"ntops-aot builds for {', '.join(built['targets'])}; this GPU ({arch}) is none "
            "of them, so no wheel can have it."
        )
    else:
        lines.append("Build a wheel that has it:")
        lines.append("  " + _command(built, op, arch, dtype_short, ndim, space))
    return NotBuiltError("\n".join(lines))


def _failed(built, group, capability, dtype):
    """The failed variants (from the manifest) this call could have used: its group,
    its dtype, an arch of the device's major version."""
    failed = {failure["id"]: failure for failure in built.get("failed", ())}
    return [
        failed[v["id"]]
        for v in built["variants"]
        if v["id"] in failed
        and v["group"] == group
        and (capability < 0 or int(v["arch"].removeprefix("sm_")) // 10 == capability // 10)
        and (dtype is None or v["dtype"] == dtype)
    ]


def _listed(values):
    return ", ".join(str(value) for value in sorted(set(values)))


def _switches(switches):
    return f" ({', '.join(f'{k}={v}' for k, v in switches.items())})" if switches else ""


def _command(built, op, arch, dtype, ndim, space):
    """The command that built this wheel (its manifest keeps it as ntops-aot wrote it),
    with what the call needs added to its arches, ops, dtypes and ndims."""
    options = built["build"]
    changes = {
        "--arch": ",".join(_with(options["arches"], arch)),
        "--ops": ",".join(_with(options["ops"], op)),
    }
    if options["dtypes"]:
        changes["--dtypes"] = ",".join(_with(options["dtypes"], dtype))
    if options["ndims"]:
        wanted = [n for n in space["ndims"] if n >= ndim][:1] if ndim else []
        changes["--ndims"] = ",".join(map(str, sorted(set(options["ndims"]) | set(wanted))))
    return rebuild(built, changes)


def rebuild(built, changes):
    """`ntops-aot build` with this wheel's options, `changes` (flag -> text) applied."""
    words = {**dict(built["build"]["command"]), **changes}
    line = ["ntops-aot", "build"]
    for flag, text in words.items():
        line += [flag] if text is None else [flag, shlex.quote(text)]
    return " ".join(line)


def _with(values, value):
    return list(values) + ([value] if value and value not in values else [])
