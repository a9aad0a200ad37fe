"""Linear layers that read one input as one product: a module's q/k/v projections, or
its MLP's gate and up projections. Their weights become row blocks of one matrix (views
of a new storage, no second copy: the parameters stay the model's, their storage is
shared), and the product is one launch of the wheel's mm (addmm with biases) where
there were two or three. FP8 checkpoints' linears fuse the same way, their weight
scales with their weights: FbgemmFp8Linear's and CompressedTensorsFP8Linear's (a scale
per output feature: one per-token quantization and one row-wise scaled_mm where there
were three of each) and FP8Linear's of 128 x 128 blocks (one per_token_group_quant_fp8
and one w8a8_block_fp8_matmul), where every projection's out_features is a multiple of
128.

Why: a decode step's products are memory-bound, and Llama-3-8B's k and v projections
(4096 -> 1024) are too narrow to give 132 multiprocessors work; the wheel's products are
tuned for the fused shapes (kernels/tuning/products.py: 4096 -> 6144 and 4096 ->
28672). And one launch and one Python call per layer less, each (FP8: two, the
activations quantized once).

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

# FP8Linear's blocks that w8a8_block_fp8_matmul was built for.
BLOCK = 128


class Fused:
    """Linears of one input (`linears`, in order) as one product, its weight, bias (and
    FP8 weight scale) buffers of `owner` (the module whose forward makes the product;
    not in its state_dict): Dynamo takes a module's buffers for static inputs, as its
    parameters, which CUDA graphs then read where they lie rather than copy in at every
    replay."""

    def __init__(self, owner, linears):
        self.owner, self.linears = owner, tuple(linears)
        self.kind = _kind(self.linears[0])
        self.products = Fused.ops(self.linears)  # (found once: each call asks)
        # FbgemmFp8Linear's activation bound, read once (the quantizer filled it at load).
        self.bound = activation_bound(self.linears[0]) if self.kind == "rows" else None
        self._fuse()

    @property
    def weight(self):
        return self._buffer(_WEIGHT)

    @property
    def bias(self):
        return self._buffer(_BIAS)

    @property
    def scale(self):
        return self._buffer(_SCALE)

    def _buffer(self, name):
        """The owner's buffer `name`: eagerly from its buffers' dict (nn.Module's
        __getattr__ took 0.86 us a lookup on this 2-core CPU, 4-7 lookups a fused
        product's call), under Dynamo as an attribute, as it traces module buffers."""
        if compiling():
            return getattr(self.owner, name)
        return self.owner._buffers[name]

    @staticmethod
    def fits(linears):
        """Whether `linears` can be fused: of one kind (plain nn.Linears, FbgemmFp8Linears
        of one activation bound, CompressedTensorsFP8Linears, or FP8Linears of 128 x 128
        blocks with dynamic activations), none with a hook that would be skipped
        (accelerate's offloading, a user's), of one input size, dtype and device, all
        with biases or none."""
        first = linears[0]
        kind = _kind(first)
        if kind is None:
            return False
        for linear in linears:
            if _kind(linear) != kind or _hooked(linear):
                return False
            if (linear.in_features, linear.weight.dtype, linear.weight.device) != (
                first.in_features, first.weight.dtype, first.weight.device
            ):  # fmt: skip
                return False
            if (linear.bias is None) != (first.bias is None):
                return False
            if kind == "rows" and not activation_bound(linear) == activation_bound(first) > 0:
                return False
        return True

    @staticmethod
    def ops(linears):
        """The wheel's ops the product of `linears` launches."""
        kind = _kind(linears[0])
        if kind in ("rows", "compressed"):
            return ("scaled_fp8_quant", "scaled_mm")
        if kind == "blocks":
            return ("per_token_group_quant_fp8", "w8a8_block_fp8_matmul")
        return ("mm",) if linears[0].bias is None else ("addmm",)

    def refusal(self, served, x):
        """Why the wheel cannot make this product of `x`, or None."""
        if self.kind == "dense":
            return served.refusal(*self.products, x, *self.tensors())
        why = served.refusal(self.products[0], x)
        if why is None and self.weight.device != x.device:
            why = "weights on another device than the input"
        if why is None and self.kind == "rows" and x.dtype != torch.bfloat16:
            # its products are bf16 whatever x is (FBGEMM's): q and k would be rotated
            # in a dtype other than the tables'
            why = f"{x.dtype} activations (FbgemmFp8Linear's products are bf16)"
        return why

    def _fuse(self):
        """The linears' weights (biases, scales) one after another in the owner's
        buffers, and each parameter's data made its rows of them."""
        scales = [_scale_of(linear, self.kind) for linear in self.linears]
        # CompressedTensorsFP8Linear's scales are (1, out): side by side
        along = 1 if self.kind == "compressed" else 0
        with torch.no_grad():
            weight = torch.cat([linear.weight for linear in self.linears])
            biases = [linear.bias for linear in self.linears]
            bias = None if biases[0] is None else torch.cat(biases)
            scale = None if scales[0] is None else torch.cat(scales, along)
        self.owner.register_buffer(_WEIGHT, weight, persistent=False)
        self.owner.register_buffer(_BIAS, bias, persistent=False)
        self.owner.register_buffer(_SCALE, scale, persistent=False)
        start, self._pointers = 0, []
        per_scale = BLOCK if self.kind == "blocks" else 1  # a scale's rows of the weight
        for linear in self.linears:
            rows = slice(start, start + linear.out_features)
            linear.weight.data = weight[rows]
            if bias is not None:
                linear.bias.data = bias[rows]
            if scale is not None:
                scales = slice(rows.start // per_scale, rows.stop // per_scale)
                _scale_of(linear, self.kind).data = scale[:, scales] if along else scale[scales]
            start = rows.stop
            self._pointers.append(linear.weight.data_ptr())

    def current(self):
        """Eagerly, fuse anew where the parameters no longer are the buffers' rows (a
        conversion after `apply`); Dynamo reads no pointers, and the graph reads the
        buffers as they are."""
        if compiling():
            return
        pointers = [_weight(linear).data_ptr() for linear in self.linears]
        if pointers != self._pointers:
            self._fuse()

    def unshare(self):
        """The parameters' storages their own again, and no buffers (as before `apply`)."""
        with torch.no_grad():
            for linear in self.linears:
                parameters = [linear.weight, linear.bias, _scale_of(linear, self.kind)]
                for parameter in parameters:
                    if parameter is not None:
                        parameter.data = parameter.data.clone()
        for name in (_WEIGHT, _BIAS, _SCALE):
            delattr(self.owner, name)

    def tensors(self):
        """The fused weight and bias, for the served checks."""
        return (self.weight,) if self.bias is None else (self.weight, self.bias)

    def __call__(self, x):
        """The linears' outputs side by side, (rows of x, sum of sizes): x's leading
        dims as rows, the product of the weight as stored (a transposed view); FP8 ones
        as each linear's served forward computes it (_layers.fp8_linear,
        fbgemm_fp8_linear and compressed_fp8_linear): activations quantized per token
        (and group of 128 for blocks), the bias added after (by the product where
        CompressedTensorsFP8Linear's is of x's dtype, as stock's)."""
        rows = x.reshape(-1, x.shape[-1])
        if self.kind == "dense":
            if self.bias is None:
                return nt.mm(rows, self.weight.t())
            return nt.addmm(self.bias, rows, self.weight.t())
        if self.kind == "rows":
            out = rows_product(rows, self.weight, self.scale, self.bound)
        elif self.kind == "compressed":
            return rows_product(rows, self.weight, self.scale, None, x.dtype, self.bias)
        else:
            out = blocks_product(rows, self.weight, self.scale, x.dtype)
        return out if self.bias is None else out + self.bias


def rows_product(rows, weight, scale, bound, dtype=torch.bfloat16, bias=None):
    """The row-wise FP8 product of 2-dim `rows`: each token quantized with its largest
    magnitude (held at `bound`, where one is given), then the product scaled by token
    and by output feature (`scale`, one a feature), in `dtype` (FbgemmFp8Linear's: bf16,
    as FBGEMM's f8f8bf16_rowwise gives it; CompressedTensorsFP8Linear's: the
    activations'); `bias` added by the product where it is of `dtype`, else after."""
    fused = bias is not None and bias.dtype == dtype
    values, scales = nt.scaled_fp8_quant(rows, use_per_token_if_dynamic=True, scale_ub=bound)
    out = nt.scaled_mm(
        values, weight.t(), scales, scale.view(1, -1), bias=bias if fused else None,
        out_dtype=dtype,
    )  # fmt: skip
    return out if bias is None or fused else out + bias


def blocks_product(rows, weight, scale_inv, dtype):
    """FP8Linear's product of 2-dim `rows` over weights scaled per BLOCK x BLOCK block:
    each token's groups of BLOCK quantized, then the block-scaled product in `dtype`;
    no bias."""
    values, scales = nt.per_token_group_quant_fp8(rows, BLOCK)
    return nt.w8a8_block_fp8_matmul(
        values, weight, scales, scale_inv, [BLOCK, BLOCK], output_dtype=dtype
    )


# The fused weight's, bias's and weight scale's names among the owner's buffers.
_WEIGHT, _BIAS, _SCALE = "ntops_fused_weight", "ntops_fused_bias", "ntops_fused_scale"
# The FP8 kinds' weight scale parameters.
_SCALES = {"rows": "weight_scale", "compressed": "weight_scale", "blocks": "weight_scale_inv"}


def _scale_of(linear, kind):
    """`linear`'s weight scale parameter (None for a plain nn.Linear)."""
    return getattr(linear, _SCALES[kind]) if kind in _SCALES else None


def _kind(linear):
    """How `linear` fuses: "dense" (a plain nn.Linear), "rows" (an FbgemmFp8Linear of
    float8_e4m3fn weights and a float32 scale per output feature, (out, 1)),
    "compressed" (a CompressedTensorsFP8Linear of the same, (1, out)), "blocks" (an
    FP8Linear of float8_e4m3fn weights, float32 scales of 128 x 128 blocks, out_features
    a multiple of 128, dynamic activations), or None: not fused."""
    if type(linear) is torch.nn.Linear:
        return "dense"
    name, where = type(linear).__name__, type(linear).__module__
    if getattr(linear, "weight", None) is None or linear.weight.dtype != torch.float8_e4m3fn:
        return None
    if name == "FbgemmFp8Linear" and where.endswith("integrations.fbgemm_fp8"):
        scale = linear.weight_scale
        if scale.dtype == torch.float32 and tuple(scale.shape) == (linear.out_features, 1):
            return "rows"
        return None
    if name == "CompressedTensorsFP8Linear" and where.endswith("integrations.compressed_tensors"):
        scale = linear.weight_scale
        if scale.dtype == torch.float32 and tuple(scale.shape) == (1, linear.out_features):
            return "compressed"
        return None
    if name == "FP8Linear" and where.endswith("integrations.finegrained_fp8"):
        blocks = getattr(linear, "block_size", None)
        scale = getattr(linear, "weight_scale_inv", None)
        if blocks is None or tuple(blocks) != (BLOCK, BLOCK) or scale is None:
            return None
        if getattr(linear, "activation_scale", None) is not None or scale.dtype != torch.float32:
            return None
        if linear.out_features % BLOCK or linear.in_features % BLOCK:
            return None
        return "blocks"
    return None


def activation_bound(linear):
    """FbgemmFp8Linear's activation bound (`input_scale_ub`, which the quantizer fills
    at load), a number: read once, at `apply`, since a call must not read GPU memory (a
    sync, and no CUDA graph could hold it)."""
    return float(linear.input_scale_ub.reshape(-1)[0])


def _weight(linear):
    """`linear.weight` from its parameters' dict (see Fused._buffer), or as an attribute
    where something other than a parameter took its place."""
    weight = linear._parameters.get("weight")
    return linear.weight if weight is None else weight


def _hooked(module):
    """Whether a call of `module` runs more than its class's forward: hooks (a user's,
    accelerate's offloading) or a forward set on the instance by another library
    (compressed-tensors' quantize-dequantize): a fused product would skip them."""
    hooks = module._forward_hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook")
    return bool(hooks) or foreign_forward(module) is not None


def foreign_forward(module):
    """The name of a forward set on `module` itself by another library (compressed-
    tensors' `quantized_forward`, accelerate's hooks), or None: none, or `apply`'s."""
    forward = module.__dict__.get("forward")
    if forward is None or getattr(forward, "ntops_prebuilt", False):
        return None
    function = getattr(forward, "__func__", forward)
    code = getattr(function, "__code__", None)
    if code is None:  # a callable object
        return f"{type(function).__module__}.{type(function).__qualname__}"
    # Where its code is, not what functools.wraps copied onto it (compressed-tensors'
    # wraps nn.Linear.forward)
    where = getattr(function, "__globals__", {}).get("__name__", "?")
    return f"{where}.{getattr(code, 'co_qualname', code.co_name)}"
