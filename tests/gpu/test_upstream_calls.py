"""Upstream ntops's calls that torch refuses, as the wheel takes them (README: where
upstream departs from torch the wheel takes both spellings): max pools with a padding
past half the kernel (upstream's test_max_pool1d calls kernel 2, stride 2, padding 2)."""

import math

import pytest
import torch

from tests.ops.max_pool import exactly, padded

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
