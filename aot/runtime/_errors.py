"""Errors for calls this wheel has no kernel for: what was asked, what the wheel has,
and the `ntops-aot build` command that would add it."""

from ntops_prebuilt._manifest import manifest


class NotBuiltError(RuntimeError):
    """This wheel holds no prebuilt kernel for the call (arch, dtype, ndim or op)."""


def not_built(group, capability, dtype, ndim):
    """Called by the launcher: the exception to raise for `group` on this call."""
    built = manifest()
    op = next(name for name, info in built["ops"].items() if group in info["groups"])
    space = built["ops"][op]
    shorts = {torch_name: short for short, torch_name in built["dtypes"].items()}
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else None
    dtype_short = shorts.get(dtype_name)
    arch = f"sm_{capability}" if capability >= 0 else None
    asked = [f"arch {arch}"] if arch else []
    asked += [f"dtype {dtype_name}"] if dtype_name else []
    asked += [f"{ndim} dim{'s' if ndim > 1 else ''} after merging contiguous dims"] if ndim else []
    name = f"{op}{_switches(space['groups'][group])}"
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
        lines.append(f"This wheel has no {op} kernels; it has {', '.join(ops) or 'none'}.")
    else:
        lines.append(
            f"This wheel has {op} for arches {_listed(v['arch'] for v in mine)}; "
            f"dtypes {_listed(v['dtype'] for v in mine)}; ndims {_listed(v['ndim'] for v in mine)}."
        )
    if dtype_name and dtype_short not in space["dtypes"]:
        lines.append(
            f"{op} takes {', '.join(space['dtypes'])} only: convert the input, "
            f"e.g. with .to(torch.{built['dtypes'][space['dtypes'][-1]]})."
        )
    elif ndim and ndim > max(space["ndims"]):
        lines.append(
            f"{op} kernels take at most {max(space['ndims'])} dims: make the tensors "
            "contiguous (.contiguous()) so that their dims merge."
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
    options = built["build"]
    arches = list(options["arches"]) + ([arch] if arch and arch not in options["arches"] else [])
    ops = list(options["ops"]) + ([op] if op not in options["ops"] else [])
    words = ["ntops-aot", "build", "--arch", ",".join(arches), "--ops", ",".join(ops)]
    if options["dtypes"]:
        dtypes = options["dtypes"] + ([dtype] if dtype and dtype not in options["dtypes"] else [])
        words += ["--dtypes", ",".join(dtypes)]
    if options["ndims"]:
        wanted = [n for n in space["ndims"] if n >= ndim][:1] if ndim else []
        ndims = sorted(set(options["ndims"]) | set(wanted))
        words += ["--ndims", ",".join(map(str, ndims))]
    return " ".join(words)
