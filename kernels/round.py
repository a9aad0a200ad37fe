"""round: input rounded to `decimals` decimal places, halves to even (torch.round).

As torch's CUDA kernels: decimals = 0 is nearbyint(x) (2.5 -> 2.0, -0.5 -> -0.0);
otherwise, with p = 10^|decimals| converted to the input's dtype, nearbyint(x * p) / p
for decimals > 0 and nearbyint(x / p) * p for decimals < 0, each step rounded to the
input's dtype as torch's scalar_t arithmetic rounds it (so round(x, decimals=1) rounds
x * 10, not x: 0.25 -> 0.2; in fp16, 2.3496 * 10 rounds to 23.5, then to 24: 2.4, as
torch's; its CPU kernel keeps x * p in fp32 and gives 2.3), the division an IEEE one
(Triton's own fp32 division is approximate). Where p overflows the dtype (10^39 in
fp32, 10^5 in fp16), results are NaN, as torch's. `decimals` is keyword-only in torch
and positional in upstream ntops: both spellings work here.
"""

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, int decimals=0, *, Tensor? out=None)",
    "torch.round",
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), decimals=2),
        sample("special", input=(6, 42, 123), decimals=1),
        sample(input=(6, 42, 123), decimals=-1),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, decimals, output):
    x = ntl.cast(input, ntl.float32)
    # 10^|decimals| by products in fp64 (exact to 10^22), then rounded to fp32 and to the
    # dtype: torch's scalar_t(std::pow(10, |decimals|)) for every exponent (checked
    # against C's pow). Past 310 factors the product is inf (10^309 overflows fp64).
    power = ntl.cast(1.0, ntl.float64)
    for _ in range(ntl.minimum(ntl.abs(decimals), 310)):
        power = power * 10.0
    scale = ntl.cast(ntl.cast(ntl.cast(power, ntl.float32), input.dtype), ntl.float32)
    # Each step rounded to the dtype, as c10's Half and BFloat16 arithmetic rounds. One
    # branch for the launch.
    if decimals == 0:
        output = libdevice.nearbyint(x)
    elif decimals > 0:
        whole = libdevice.nearbyint(ntl.cast(ntl.cast(x * scale, input.dtype), ntl.float32))
        if scale < 8.507059173023462e37:  # 2^126: whole / scale is 0 or a normal number
            output = libdevice.div_rn(whole, scale)
        else:
            # decimals = 38: subnormal quotients, which libdevice's div_rn flushes to 0 in
            # Triton's build (div.rn.ftz.f32); fp64's rounded to fp32 are IEEE fp32's
            # (53 >= 2 * 24 + 2 bits: rounding twice is rounding once). Only here: fp64
            # runs at 1/64 of fp32's rate on sm_86 and sm_89.
            wide = ntl.cast(whole, ntl.float64) / ntl.cast(scale, ntl.float64)
            output = ntl.cast(wide, ntl.float32)
    else:
        # A flushed quotient (|x / p| < 2^-126) rounds to the same signed 0 as the exact.
        quotient = ntl.cast(libdevice.div_rn(x, scale), input.dtype)
        output = libdevice.nearbyint(ntl.cast(quotient, ntl.float32)) * scale  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.int64,)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
