"""Upstream ntops's calls that the wheel refused, as it takes them now (README: where
upstream departs from torch the wheel takes both spellings): max pools with a padding
past half the kernel, which torch refuses (upstream's test_max_pool1d calls kernel 2,
stride 2, padding 2), and sgn of complex64 tensors (upstream's test_sgn), compared with
torch's CUDA kernel."""

import math

import pytest
import torch

from tests.gpu.layouts import values
from tests.ops.max_pool import exactly, padded
from tests.ops.sgn import PARTS, close

F = torch.nn.functional


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize(("kernel", "stride"), [(2, 2), (3, 2), (3, 1)])
def test_max_pool1d_as_upstreams_test_calls_it(nt, kernel, stride, ceil_mode):
    """Padding 2 beside kernels of 2 and 3: values and indices against the input padded
    with -inf and pooled without padding (tests/ops/max_pool.padded)."""
    x = torch.randn(3, 4, 37, device="cuda")
    options = {"kernel_size": kernel, "stride": stride, "padding": 2, "ceil_mode": ceil_mode}
    reference = padded("max_pool1d")
    exactly(nt.max_pool1d(x, **options), reference(x, **options))
    got = nt.max_pool1d(x, **options, return_indices=True)
    exactly(got, reference(x, **options, return_indices=True))
    if not ceil_mode:  # the same windows as the padding spelled out
        spelled = F.max_pool1d(F.pad(x, (2, 2), value=-math.inf), kernel, stride)
        exactly(got[0], spelled)


def test_a_window_inside_the_padding_is_minus_infinity_at_index_minus_one(nt):
    x = torch.randn(2, 3, 10, device="cuda")
    values, indices = nt.max_pool1d(x, 2, 2, padding=2, return_indices=True)
    assert values.shape == (2, 3, 7)
    for end in (0, -1):  # windows [-2, -1] and [10, 11]
        assert values[..., end].eq(-math.inf).all()
        assert indices[..., end].eq(-1).all()
    torch.testing.assert_close(values[..., 1:-1], F.max_pool1d(x, 2, 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_max_pools_past_half_the_kernel(nt, dtype):
    """2-d and 3-d pools in every float dtype, NaN and -inf beside the padding, ceil_mode,
    dilation, inputs without a batch dim, channels-last and sliced inputs."""
    x = torch.randn(2, 3, 19, 23, device="cuda").to(dtype)
    x[0, 0, 0, :4], x[1, 1, :3, :3] = math.nan, -math.inf
    reference = padded("max_pool2d")
    for options in (
        {"kernel_size": 2, "stride": 2, "padding": 2},
        {"kernel_size": (2, 3), "stride": (1, 2), "padding": (2, 3), "ceil_mode": True},
        {"kernel_size": 3, "stride": 3, "padding": (1, 2), "dilation": (2, 1)},
    ):
        want = reference(x, **options, return_indices=True)
        exactly(nt.max_pool2d(x, **options, return_indices=True), want)
        exactly(nt.max_pool2d(x[1], **options), reference(x[1], **options))
        for view in (x.contiguous(memory_format=torch.channels_last), x[:, :, 1:, ::2]):
            got, wanted = nt.max_pool2d(view, **options), reference(view, **options)
            torch.testing.assert_close(got, wanted, rtol=0, atol=0, equal_nan=True)
    cube = torch.randn(2, 2, 7, 8, 9, device="cuda").to(dtype)
    options = {"kernel_size": (2, 3, 2), "stride": 2, "padding": (2, 1, 2), "ceil_mode": True}
    want = padded("max_pool3d")(cube, **options, return_indices=True)
    exactly(nt.max_pool3d(cube, **options, return_indices=True), want)


@pytest.mark.parametrize("shape", [(1000,), (31, 29), (3, 17, 11), (2, 3, 5, 13)])
def test_sgn_of_complex64_as_upstreams_test_calls_it(nt, shape):
    """torch.complex(randn, randn) of 1 to 4 dims, as upstream's test makes them."""
    z = torch.complex(torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda"))
    result = nt.sgn(z)
    close(result, torch.sgn(z))
    assert result.stride() == z.stride()


def test_sgn_of_complex64_special_values(nt):
    """Every pair of tests/ops/sgn.PARTS (zeros of both signs, infinities, NaN, moduli
    past float32 and within it, subnormals), against torch's CUDA kernel."""
    parts = torch.tensor(PARTS, device="cuda")
    n = len(PARTS)
    grid = torch.complex(parts[:, None].expand(-1, n), parts[None, :].expand(n, -1))
    close(nt.sgn(grid), torch.sgn(grid))
    close(nt.sgn(grid.mT), torch.sgn(grid.mT))


def test_sgn_of_complex64_views_and_out(nt):
    """Non-contiguous, permuted, expanded, conjugated and 0-dim inputs; out= contiguous,
    transposed, conjugated and the input itself (in place); refusals."""
    z = values((6, 42, 123), torch.complex64, "special")
    z[0, 0, :5] = 0
    for view in (
        z.mT, z[:, ::2, 1:], z.permute(2, 0, 1), z[:1].expand(4, -1, -1), z.conj(),
        z.mT.conj(), z[0, 0, 0],
    ):  # fmt: skip
        result = nt.sgn(view)
        close(result, torch.sgn(view))
        assert result.stride() == torch.sgn(view).stride()
    close(nt.sgn(z[:0]), torch.sgn(z[:0]))
    for out in (torch.empty_like(z), torch.empty_like(z.mT).mT, torch.empty_like(z).conj()):
        assert nt.sgn(z[:, :, :], out=out) is out
        close(out, torch.sgn(z))
    out = torch.empty_like(z.mT)
    assert nt.sgn(z.mT, out=out) is out
    close(out, torch.sgn(z.mT))
    x = z.clone()
    assert nt.sgn(x, out=x) is x
    close(x, torch.sgn(z))
    with pytest.raises(nt.NotBuiltError, match="complex128"):
        nt.sgn(z.to(torch.complex128))
    with pytest.raises(RuntimeError, match=r"sgn: out is torch\.float32"):
        nt.sgn(z, out=torch.empty(z.shape, device="cuda"))


@pytest.mark.parametrize(
    "dtype",
    [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int16, torch.int32,
     torch.int64, torch.uint8],
)  # fmt: skip
def test_sgn_of_real_tensors_is_sign(nt, dtype):
    """sgn's real dtypes take sign's kernels (aot/runtime/_sgn.py sends them), out= too."""
    x = values((6, 42, 123), dtype, "special")
    for view in (x, x.mT):
        assert torch.equal(nt.sgn(view), torch.sgn(view))
    out = torch.empty_like(x)
    assert nt.sgn(x, out=out) is out
    assert torch.equal(out, torch.sgn(x))
