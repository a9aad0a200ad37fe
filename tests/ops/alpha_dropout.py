"""alpha_dropout (kernels/alpha_dropout.py): its mask is random, so a kernel's result is
checked element by element (the saturation value, or a * input + b) and by the
fraction kept; its declared samples are the deterministic calls (no training, p = 0),
and the training calls are added here. The interpreted check runs the kernel under
Triton's interpreter on the CPU, with the runtime's affine map (the public function
draws from torch's CUDA generator, which the CPU has not)."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided
from tests.tolerances import tolerance

GROUPS = {"alpha_dropout": {"alpha_dropout": {}}}
P = 0.25


def num_tensors(variant):
    return 2  # input, output


def run(nt, variant, spec, dtype, bucket):
    """Training with p = 0.25 on the spec's layout: about 3 in 4 kept. The reference is
    torch's affine map on the elements the result kept."""
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    result = nt.alpha_dropout(x, P, training=True)
    return result, expected(result, x, P)


def expected(result, x, p):
    """What a result of alpha_dropout(x, p) must be, given which elements it dropped
    (those equal to the saturation value): a * x + b elsewhere, in fp32 rounded once.
    Checks that about 1 - p of them were kept."""
    a, b, saturated = _affine(p)
    dropped = result == torch.tensor(saturated, dtype=x.dtype, device=x.device)
    count = x.numel()
    if count >= 1000:
        kept = 1 - dropped.float().mean().item()
        assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / count), kept
    return torch.where(dropped, result, (a * x.float() + b).to(x.dtype))


def _affine(p):
    """torch's a, b and saturation value (ATen's _dropout_impl), written out here apart
    from the runtime's: kept elements a * x + b, dropped ones a * -alpha + b."""
    alpha = 1.7580993408473766
    a = 1 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    return a, alpha * a * p, alpha * a * (p - 1)


def calls(name, dtype):
    """Training with p = 0.1, as a new tensor and in place (the kernel runs), and p = 1
    (everything dropped: input * 0)."""

    def training(inplace, p=0.1):
        return lambda make: ((make((2, 6, 16), dtype), p, True), {"inplace": inplace})

    return [
        Call("alpha_dropout training", name, training(False)),
        Call("alpha_dropout training inplace", name, training(True)),
        Call("alpha_dropout p=1", name, training(False, 1.0)),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, F.alpha_dropout, FLOATS)


def _draw(d, op):
    """The calls whose answers are not random: not training, p = 0, p = 1 (input * 0:
    NaN stays NaN), empty tensors, and p out of range (both refuse); positional or by
    name, in place or not. (The random masks are tests/gpu/test_every_kernel's, by
    `run` above.)"""
    from tests.gpu.fuzz_inputs import FLOATS

    x = d.tensor(d.shape(), d.principal(FLOATS))
    p = d.pick((0.0, 0.5, 1.0, 1.0, 0.2, 1.5 if d.chance(0.3) else 1.0, -0.5))
    training = d.chance(0.7) and not 0 < p < 1  # where the answer is not random
    inplace = d.chance(0.25)
    if d.chance(0.5):
        return (x, p, training, inplace), {}
    return (x,), {"p": p, "training": training, "inplace": inplace}


def interpreted(make):
    """The kernel with the runtime's affine map against torch's: about 1 - p kept, kept
    elements a * x + b and dropped ones the saturation value (fp32, fp16 and bf16, a
    transposed view); the same mask for the same seed and offset, another for the next
    offset; p = 1 as torch's input * 0 (NaN, -0.0); the calls that launch nothing."""
    from tests.ops._runtime import load

    nt = load(make, "_alpha_dropout", GROUPS)
    x = torch.randn(50000)
    out, again = torch.empty_like(x), torch.empty_like(x)
    kernel = make("alpha_dropout", 1)
    for p in (0.9, 0.3):
        kernel(x, 1234, 0, *nt.affine(p), out)
        close(out, expected(out, x, p))
    kernel(x, 1234, 0, *nt.affine(0.3), again)
    assert torch.equal(out, again)  # the same seed and offset: the same mask
    kernel(x, 1234, 50000, *nt.affine(0.3), again)
    assert not torch.equal(out, again)  # the next offset: another mask
    check_the_map_is_torchs(x)
    check_half_types(make, nt)
    check_everything_dropped(make, nt)
    check_without_a_launch(nt)


def check_the_map_is_torchs(x):
    """torch's own alpha_dropout (on the CPU) gives what `expected` assumes: about p
    of the elements at the saturation value (to its rounding), a * x + b elsewhere."""
    a, b, saturated = _affine(0.3)
    theirs = F.alpha_dropout(x, 0.3, training=True)
    dropped = (theirs - saturated).abs() <= 2e-7
    assert abs(dropped.float().mean().item() - 0.3) < 0.02
    close(theirs[~dropped], a * x[~dropped] + b)


def check_half_types(make, nt):
    """fp16 and bf16 computed in fp32 and rounded once; a transposed view (a 2-dim
    kernel's strided loads)."""
    for short, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        x = torch.randn(300, 40).to(dtype).t()
        out = torch.empty(300, 40, dtype=dtype).t()
        make("alpha_dropout", 2, short)(x, 7, 0, *nt.affine(P), out)
        close(out, expected(out, x, P))


def check_everything_dropped(make, nt):
    """p = 1: torch returns input * 0, so NaN and infinities give NaN and negative
    numbers -0.0."""
    x = torch.tensor([math.nan, math.inf, -math.inf, -1.0, 2.0, -0.0, 0.0])
    out = torch.empty_like(x)
    make("alpha_dropout", 1)(x, 1, 0, *nt.affine(1.0), out)
    want = F.alpha_dropout(x, 1.0, training=True)
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.nan_to_num(), want.nan_to_num())
    assert torch.equal(out.signbit(), want.signbit())


def check_without_a_launch(nt):
    """Not training (the default), p = 0 or no elements: the input itself, as torch's;
    p outside [0, 1] refused even then, as torch refuses it; a CPU tensor in training
    refused (the mask comes from torch's CUDA generator)."""
    x = torch.randn(3, 4)
    assert nt.alpha_dropout(x) is x
    assert nt.alpha_dropout(x, 0.5, False, True) is x
    assert nt.alpha_dropout(x, 0.0, True) is x
    empty = torch.empty(0, 3)
    assert nt.alpha_dropout(empty, 0.5, True) is empty
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            nt.alpha_dropout(x, p)
    with pytest.raises(TypeError, match="CUDA"):
        nt.alpha_dropout(x, 0.5, True)


def close(result, wanted):
    assert result.dtype == wanted.dtype
    torch.testing.assert_close(result, wanted, **tolerance(wanted.dtype))
