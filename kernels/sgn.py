"""sgn: z / |z| of complex64 tensors, 0 where z is 0 (torch.sgn); of real tensors it is
sign, which kernels/sign.py's kernels compute (aot/runtime/_sgn.py sends them there).

No op here takes complex tensors: the runtime passes the real views
(torch.view_as_real: float32, (..., 2), the last dim the (re, im) pairs at stride 1),
as upstream's sgn does. The launcher coalesces them as any element-wise op's, and a
pair stays side by side through that: the last dim keeps stride 1 and its place (it has
the output's least stride), so in the flattened tensor element 2k is a real part and
2k + 1 its imaginary part, and a block of an even size starting at an even element
holds whole pairs, which the application splits apart (`tl.split`).

As torch's CUDA kernel (z / std::abs(z): c10::complex's division by a real number,
part by part): |z| without overflow where it is representable (hypot's way, scaled by
max(|re|, |im|): 3e38 + 0j gives 1 + 0j; 3e38 + 3e38j, whose modulus 4.2e38 is past
float32, gives 0 + 0j, as torch does), each part divided by it in IEEE division
(subnormals kept: 1e-40 + 0j gives 1 + 0j); a NaN part gives NaN + NaNj, an infinite
one NaN and its partner 0 or NaN (inf + 1j: NaN + 0j; inf + infj: NaN + NaNj); 0 of
either sign gives +0 + 0j. torch's CPU kernel gives the same in its vectorised loop,
but in its scalar loop (a tensor's last few elements, and tensors of a few) divides by
|z| + 0j as a complex number, which makes both parts NaN beside any infinite part:
tests/ops/sgn.py's `by_parts` is the CUDA kernel's arithmetic, and the GPU suite
compares with torch's CUDA kernel itself.

Only the unit-stride, aligned and 64-bit kernels are built: a real view's last dim has
stride 1 in every call, so a generic 32-bit kernel would never be chosen.
"""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=("fp32",),  # complex64's parts
    ndims=element_wise.NDIMS,
    specs=("aligned", "unit", "wide"),
)

API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.sgn",
    wrapper="_sgn",
    # Real inputs (sign's kernels); complex ones in tests/ops/sgn.py's calls.
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    re, im = ntl.split(ntl.reshape(input, (input.shape[0] // 2, 2)))
    a, b = ntl.abs(re), ntl.abs(im)
    big = ntl.where(a < b, b, a)
    small = ntl.where(a < b, a, b)
    # hypot(re, im), scaled; a zero `big` (z = 0) is never divided by.
    ratio = ntl.div_rn(small, ntl.where(big == 0, 1.0, big))
    modulus = big * ntl.sqrt_rn(1.0 + ratio * ratio)
    zero = (re == 0) & (im == 0)
    modulus = ntl.where((re != re) | (im != im), float("nan"), ntl.where(zero, 1.0, modulus))
    real = ntl.where(zero, 0.0, ntl.div_rn(re, modulus))
    imag = ntl.where(zero, 0.0, ntl.div_rn(im, modulus))
    output = ntl.reshape(ntl.join(real, imag), (input.shape[0],))  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
