"""What the installed wheel serves (its manifest: ops, dtypes, head dims, arches), the
per-call check of a call's tensors against it, and the one warning a call gets where the
wheel cannot serve it and transformers' own code runs instead."""

import dataclasses
import warnings
from collections.abc import Mapping

import torch
from torch._dynamo.comptime import comptime

from ..._manifest import manifest

# The device type the wheel's kernels run on (tests/unit points it at the meta device to
# follow the served path on fake tensors).
DEVICE = "cuda"
# (what, why) pairs already warned about, in this process: as Python's own warning
# registry, and not on an object, since a comptime callback (below) sees constants only.
_WARNED = set()


class FallbackWarning(RuntimeWarning):
    """A part of a model runs transformers' own code: the wheel cannot serve it. The
    message names the part and the reason; each pair is warned about once."""


@dataclasses.dataclass(frozen=True)
class Served:
    """The wheel's kernels for one arch: the dtypes each op was built for, and the head
    dims of the attention ops."""

    dtypes: Mapping[str, tuple[torch.dtype, ...]]
    head_dims: Mapping[str, tuple[int, ...]]
    arch: str | None  # the device's (sm_90), None where no CUDA device was seen

    @classmethod
    def of_wheel(cls, capability: int | None) -> "Served":
        """What the wheel serves on a device of `capability` (90 for sm_90: kernels of its
        major arch at or below it, as the launcher loads them); every arch if None."""
        built = manifest()
        names = built["dtypes"]
        dtypes, head_dims = {}, {}
        for variant in built["variants"]:
            arch = int(variant["arch"].removeprefix("sm_"))
            dtype = getattr(torch, names.get(variant["dtype"], ""), None)
            if dtype is None or not _runs_on(arch, capability):
                continue
            dtypes.setdefault(variant["op"], set()).add(dtype)
            if "head_dim" in variant["switches"]:
                head_dims.setdefault(variant["op"], set()).add(int(variant["switches"]["head_dim"]))
        return cls(
            {op: tuple(sorted(found, key=str)) for op, found in dtypes.items()},
            {op: tuple(sorted(found)) for op, found in head_dims.items()},
            None if capability is None else f"sm_{capability}",
        )

    def missing(self, op):
        """Why the wheel has no kernel of `op` at all on this arch, or None."""
        if op in self.dtypes:
            return None
        where = f" for {self.arch}" if self.arch else ""
        return f"the wheel has no {op} kernels{where} (`ntops-aot build --ops {op}` adds them)"

    def refusal(self, op, first, *others):
        """Why the wheel cannot run `op` on these tensors, or None: the device, the dtype
        it was built for, one dtype and device for all, and no gradient to keep."""
        # Every call of every served module asks this (about 9 times a decoder layer):
        # flags and device indices, not torch.device objects, which each `.device`
        # makes anew (this 2-core CPU, us: .device.type 0.65, two devices compared
        # 0.28, .is_cuda and .get_device() 0.04 each, torch.is_grad_enabled() 0.13).
        if not _on_device(first):
            return f"{first.device.type} tensors (the wheel's kernels run on CUDA devices)"
        if first.dtype not in self.dtypes.get(op, ()):
            built = ", ".join(_name(dtype) for dtype in self.dtypes.get(op, ()))
            return f"{_name(first.dtype)} tensors (its {op} kernels are {built})"
        where = first.get_device()
        for other in others:
            if other.dtype != first.dtype or other.get_device() != where or not _on_device(other):
                return f"mixed dtypes or devices ({_name(first.dtype)} and {_name(other.dtype)})"
        if any(t.requires_grad for t in (first, *others)) and torch.is_grad_enabled():
            return "gradients (the wheel serves inference: run under torch.no_grad())"
        return None


def _on_device(tensor):
    """Whether `tensor` is on a device of type DEVICE."""
    return tensor.is_cuda if DEVICE == "cuda" else tensor.device.type == DEVICE


def _runs_on(arch, capability):
    """Whether kernels built for `arch` load on a device of `capability`: cubins run on
    their major arch at or above their minor one (sm_80's on sm_86 and sm_89)."""
    return capability is None or (arch // 10 == capability // 10 and arch <= capability)


def _name(dtype):
    return str(dtype).removeprefix("torch.")


def fall_back(what, why):
    """Warn once that `what` runs transformers' own code because of `why`. Under
    torch.compile the warning is given while Dynamo traces (comptime), so that it costs
    the graph nothing: a call to `warnings.warn` would break it."""
    comptime(_traced_warning, lambda: _warn(what, why))


def _traced_warning(context):
    _warn(
        context.get_local("what").as_python_constant(),
        context.get_local("why").as_python_constant(),
    )


def _warn(what, why):
    if (what, why) in _WARNED:
        return
    _WARNED.add((what, why))
    warnings.warn(
        f"ntops_prebuilt: {what} runs transformers' own code: {why}", FallbackWarning, stacklevel=4
    )
