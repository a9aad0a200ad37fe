"""Linear layers that read one input as one product: a module's q/k/v projections, or
its MLP's gate and up projections. Their weights become row blocks of one matrix (views
of a new storage, no second copy: the parameters stay the model's, their storage is
shared), and the product is one launch of the wheel's mm (addmm with biases) where
there were two or three.

Why: a decode step's products are memory-bound, and Llama-3-8B's k and v projections
(4096 -> 1024) are too narrow to give 132 multiprocessors work; the wheel's products are
tuned for the fused shapes (kernels/tuning/products.py: 4096 -> 6144 and 4096 ->
28672). And one launch and one Python call per layer less, each.

The shared storage is the parameters' own, so writes into them (load_state_dict) are
seen. A conversion after `apply` (model.to(), .cuda(), .half()) converts the buffers
with the parameters, each into a storage of its own: the values agree, the sharing is
lost, and the next eager call fuses them anew (`current`). A compiled call reads the
buffers as they are: generate()'s eager prefill has fused them by then; a model
converted, then written in place, then run only under torch.compile would read the
buffers' older values."""

import torch

from ... import torch as nt
from ..._library import compiling


class Fused:
    """nn.Linears of one input (`linears`, in order) as one product, its weight and bias
    buffers of `owner` (the module whose forward makes the product; not in its
    state_dict): Dynamo takes a module's buffers for static inputs, as its parameters,
    which CUDA graphs then read where they lie rather than copy in at every replay."""

    def __init__(self, owner, linears):
        self.owner, self.linears = owner, tuple(linears)
        self._fuse()

    @property
    def weight(self):
        return getattr(self.owner, _WEIGHT)

    @property
    def bias(self):
        return getattr(self.owner, _BIAS)

    @staticmethod
    def fits(linears):
        """Whether `linears` can be fused: plain nn.Linears (no subclass, no hook that
        would be skipped: accelerate's offloading, a user's), of one input size, dtype
        and device, all with biases or none."""
        first = linears[0]
        for linear in linears:
            if type(linear) is not torch.nn.Linear or _hooked(linear):
                return False
            if (linear.in_features, linear.weight.dtype, linear.weight.device) != (
                first.in_features, first.weight.dtype, first.weight.device
            ):  # fmt: skip
                return False
            if (linear.bias is None) != (first.bias is None):
                return False
        return True

    def _fuse(self):
        """The linears' weights (and biases) one after another in the owner's buffers,
        and each parameter's data made its rows of them."""
        with torch.no_grad():
            weight = torch.cat([linear.weight for linear in self.linears])
            biases = [linear.bias for linear in self.linears]
            bias = None if biases[0] is None else torch.cat(biases)
        self.owner.register_buffer(_WEIGHT, weight, persistent=False)
        self.owner.register_buffer(_BIAS, bias, persistent=False)
        start, self._pointers = 0, []
        for linear in self.linears:
            rows = slice(start, start + linear.out_features)
            linear.weight.data = weight[rows]
            if bias is not None:
                linear.bias.data = bias[rows]
            start = rows.stop
            self._pointers.append(linear.weight.data_ptr())

    def current(self):
        """Eagerly, fuse anew where the parameters no longer are the buffers' rows (a
        conversion after `apply`); Dynamo reads no pointers, and the graph reads the
        buffers as they are."""
        if compiling():
            return
        pointers = [linear.weight.data_ptr() for linear in self.linears]
        if pointers != self._pointers:
            self._fuse()

    def unshare(self):
        """The parameters' storages their own again, and no buffers (as before `apply`)."""
        with torch.no_grad():
            for linear in self.linears:
                linear.weight.data = linear.weight.data.clone()
                if linear.bias is not None:
                    linear.bias.data = linear.bias.data.clone()
        delattr(self.owner, _WEIGHT)
        delattr(self.owner, _BIAS)

    def tensors(self):
        """The fused weight and bias, for the served checks."""
        return (self.weight,) if self.bias is None else (self.weight, self.bias)

    def __call__(self, x):
        """The linears' outputs side by side, (rows of x, sum of sizes): x's leading
        dims as rows, the product of the weight as stored (a transposed view)."""
        rows = x.reshape(-1, x.shape[-1])
        if self.bias is None:
            return nt.mm(rows, self.weight.t())
        return nt.addmm(self.bias, rows, self.weight.t())


# The fused weight's and bias's names among the owner's buffers.
_WEIGHT, _BIAS = "ntops_fused_weight", "ntops_fused_bias"


def _hooked(module):
    return bool(module._forward_hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook"))
