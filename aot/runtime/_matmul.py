"""Matrix products: mm, bmm, addmm, and matmul routing to them. fp32 goes through
TF32 unless torch.get_float32_matmul_precision() is "highest"."""

import math

import torch

from . import _C, _ops
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
# kernels/_lib/products.py's precisions: the default (TF32 for fp32), then IEEE fp32.
_TF32, _IEEE = _ops.SWITCHES["mm"]["fp32_precision"]
_MM, _BMM, _ADDMM = (check.groups(op, "fp32_precision") for op in ("mm", "bmm", "addmm"))


def _precision(input):
    ieee = input.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest"
    return (_IEEE,) if ieee else (_TF32,)


def _span(tensor):
    """The bytes a tensor's elements lie in, [first, last)."""
    sizes, strides = tensor.shape, tensor.stride()
    extent = sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True))
    first = tensor.data_ptr()
    return first, first + (extent + 1) * tensor.element_size()


def _apart(op, input, out):
    """`input` for a product written into `out`: the same elements are read from a
    copy (torch allows out=input, and the kernels read the bias tile by tile while
    others store); any other overlap is refused, as torch refuses it on CUDA."""
    if input.numel() == 0 or out.numel() == 0:
        return input
    (first, last), (out_first, out_last) = _span(input), _span(out)
    if last <= out_first or out_last <= first:
        return input
    if input.shape == out.shape and input.stride() == out.stride() and first == out_first:
        return input.clone()
    raise ValueError(
        f"{op}: input and out overlap in memory without being the same elements; the "
        "product would overwrite input before it is read (clone the input)"
    )


def _operands(op, input, mat2, out):
    """Refuse what is not a tensor, by torch's names for the arguments; their shapes
    (inner dims, batches, out's shape) are the launcher's to check."""
    check.tensor(op, "input", input)
    check.tensor(op, "mat2", mat2)
    if out is not None:
        check.tensor(op, "out", out)


def _product_fake(twin):
    """A product's fake: torch's product, and torch's rule for out= (its dtype)."""

    def product(input, other, *, out=None):
        result = twin(input, other)
        if out is not None and out.dtype != result.dtype:
            raise RuntimeError(
                f"Expected out tensor to have dtype {result.dtype}, but got {out.dtype}"
            )
        return result

    return product


# torch 2.4's fake matmul.out decomposes into a copy_ that reaches for a real device.
for _name in ("mm", "bmm", "matmul"):
    fake(_name)(_product_fake(getattr(torch, _name)))


@routed("mm")
def mm(input, mat2, *, out=None):
    """input @ mat2 for 2-D tensors; the product allocated by the launcher unless given."""
    _operands("mm", input, mat2, out)
    return _launch(_MM[_precision(input)], input, mat2, out)


@routed("bmm")
def bmm(input, mat2, *, out=None):
    """input[b] @ mat2[b] for 3-D tensors."""
    _operands("bmm", input, mat2, out)
    return _launch(_BMM[_precision(input)], input, mat2, out)


@routed("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 @ mat2); input broadcasts to the product's shape
    (in the launcher, with stride 0)."""
    check.tensor("addmm", "input", input)
    check.tensor("addmm", "mat1", mat1)
    check.tensor("addmm", "mat2", mat2)
    if out is not None:
        input = _apart("addmm", input, check.tensor("addmm", "out", out))
    return _launch(_ADDMM[_precision(mat1)], input, mat1, mat2, beta, alpha, out)


@routed("matmul")
def matmul(input, other, *, out=None):
    """torch.matmul: dot, matrix-vector, matrix and batched products; leading batch
    dims broadcast, and fold into rows when `other` is a matrix or a vector."""
    check.tensor("matmul", "input", input)
    check.tensor("matmul", "other", other)
    if out is not None and check.tensor("matmul", "out", out).device != input.device:
        raise RuntimeError(
            f"matmul: out is on {out.device}, the inputs on {input.device} (as torch refuses)"
        )
    if input.ndim == 0 or other.ndim == 0:
        raise ValueError("matmul: both arguments need at least one dim")
    inner = other.shape[-2] if other.ndim > 1 else other.shape[0]
    if input.shape[-1] != inner:
        raise ValueError(
            f"matmul: input {list(input.shape)} and other {list(other.shape)} do not "
            f"multiply: {input.shape[-1]} columns against {inner} rows"
        )
    if input.ndim == other.ndim == 2 or (
        input.ndim == other.ndim == 3 and input.shape[0] == other.shape[0]
    ):
        op = mm if input.ndim == 2 else bmm
        if out is not None and tuple(out.shape) != (*input.shape[:-1], other.shape[-1]):
            raise ValueError(
                f"matmul: out has shape {list(out.shape)}, the product is "
                f"{[*input.shape[:-1], other.shape[-1]]}"
            )
        return op(input, other, out=out)
    left = input if input.ndim > 1 else input.unsqueeze(0)
    right = other if other.ndim > 1 else other.unsqueeze(-1)
    # Sizes spelled out rather than -1: a dim of 0 leaves -1 undetermined.
    if right.ndim == 2:  # fold every leading dim of `left` into its rows
        rows = left.reshape(math.prod(left.shape[:-1]), left.shape[-1])
        result = mm(rows, right).view(*left.shape[:-1], right.shape[-1])
    else:
        batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])
        count = math.prod(batch)
        left = left.expand(*batch, *left.shape[-2:]).reshape(count, *left.shape[-2:])
        right = right.expand(*batch, *right.shape[-2:]).reshape(count, *right.shape[-2:])
        result = bmm(left, right).view(*batch, left.shape[-2], right.shape[-1])
    if other.ndim == 1:
        result = result.squeeze(-1)
    if input.ndim == 1:
        result = result.squeeze(-2 if other.ndim > 1 else -1)
    if out is None:
        return result
    if out.dtype != result.dtype:
        raise TypeError(f"matmul: out is {out.dtype}, the product {result.dtype}")
    if out.shape != result.shape:
        raise ValueError(
            f"matmul: out has shape {list(out.shape)}, the product is {list(result.shape)}"
        )
    return out.copy_(result)
