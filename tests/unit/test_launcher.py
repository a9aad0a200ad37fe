"""The launcher's choices, without a GPU: `_C.plan` runs a call up to the launch
(reading, checking, coalescing, choosing the kernel, packing its parameters) and
reports what it would launch on a device of the given compute capability."""

import pytest
import torch

from ntops_aot.aot import config
from tests.subclasses import Wrapper
from tests.unit.test_render import parts

H = torch.float16


@pytest.fixture(params=["dlpack", "python"], autouse=True)
def tensor_api(request, installed):
    """Every test runs twice: tensors read through DLPack's C exchange API and
    through torch's Python API."""
    previous = installed._C._force_python_api(request.param == "python")
    yield request.param
    installed._C._force_python_api(previous)


@pytest.fixture
def plan(installed):
    def plan(key, capability, *args):
        return installed._C.plan(installed._C.group(key), capability, *args)

    return plan


def add(plan, x, y, out, capability=90, alpha=1.0):
    return plan("add-other=tensor", capability, x, y, alpha, out)


def test_contiguous_tensors_of_any_ndim_run_the_one_dim_kernel(plan):
    x, y, out = (torch.randn(6, 42, 123, dtype=H) for _ in range(3))
    chosen = add(plan, x, y, out)
    # 30996 elements: not a multiple of 16
    assert chosen["kernel"] == "add-sm_90-fp16-nd1-other=tensor/i32-u000"
    assert chosen["ndim"] == 1
    assert chosen["grid"] == -(-6 * 42 * 123 // 1024)
    assert chosen["params"] == [
        x.data_ptr(),
        30996,
        y.data_ptr(),
        30996,
        out.data_ptr(),
        30996,
        1.0,
    ]


def test_aligned_sizes_get_the_vectorised_kernel(plan):
    x, y, out = (torch.randn(4, 64, 128, dtype=H) for _ in range(3))
    assert add(plan, x, y, out)["kernel"] == "add-sm_90-fp16-nd1-other=tensor/i32-u000-a16"


def test_unaligned_pointers_miss_the_vectorised_kernel(plan):
    x, y, out = (torch.randn(4097, dtype=H)[1:] for _ in range(3))
    assert add(plan, x, y, out)["kernel"] == "add-sm_90-fp16-nd1-other=tensor/i32-u000"


def test_views_dense_in_another_order_still_merge(plan):
    x, y, out = (torch.randn(64, 32, 16, dtype=H).permute(2, 0, 1) for _ in range(3))
    assert add(plan, x, y, out)["kernel"] == "add-sm_90-fp16-nd1-other=tensor/i32-u000-a16"


def test_strided_views_keep_their_dims(plan):
    x, y, out = (torch.randn(64, 256, dtype=H)[:, ::2] for _ in range(3))
    # stride 2 throughout: one dim
    assert add(plan, x, y, out)["kernel"] == "add-sm_90-fp16-nd1-other=tensor/i32"
    x, y, out = (torch.randn(64, 256, dtype=H)[:, ::2][:, :100] for _ in range(3))
    chosen = add(plan, x, y, out)
    assert chosen["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i32"
    assert chosen["params"][:5] == [x.data_ptr(), 64, 100, 256, 2]
    x, y, out = (torch.randn(64, 256, dtype=H)[:, 1:101] for _ in range(3))
    assert add(plan, x, y, out)["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i32-u111"


def test_broadcasting_uses_stride_zero_without_copies(plan):
    x, bias, out = (
        torch.randn(64, 128, dtype=H),
        torch.randn(128, dtype=H),
        torch.empty(64, 128, dtype=H),
    )
    chosen = add(plan, x, bias, out)
    assert chosen["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i32-u111-a16"
    # Parameters per tensor: pointer, sizes, then the strides that are not constant 1.
    assert chosen["params"][4:8] == [bias.data_ptr(), 64, 128, 0]  # the bias's row stride is 0
    column, row, out = (
        torch.randn(7, 1, dtype=H),
        torch.randn(1, 5, dtype=H),
        torch.empty(7, 5, dtype=H),
    )
    assert add(plan, column, row, out)["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i32"


def test_offsets_past_int32_take_the_64_bit_kernel(plan):
    big = torch.empty(2**31 + 5, dtype=H, device="meta")
    chosen = add(plan, big, big, big)
    # 64-bit kernels exist at the widest ndim built (2 here); one dim is padded to two.
    assert chosen["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i64"
    assert chosen["grid"] == -(-(2**31 + 5) // 1024)
    rows = torch.empty(2, 2**31, dtype=H, device="meta")[:, :3]  # 6 elements, 2^31 apart
    chosen = add(plan, rows, rows, torch.empty(2, 3, dtype=H))
    assert chosen["kernel"] == "add-sm_90-fp16-nd2-other=tensor/i64"


def test_arches_fall_back_within_a_major_version(plan):
    x = torch.randn(256, dtype=H)
    assert add(plan, x, x, x, capability=80)["kernel"].startswith("add-sm_80-")
    assert add(plan, x, x, x, capability=86)["kernel"].startswith("add-sm_80-")
    assert add(plan, x, x, x, capability=89)["kernel"].startswith("add-sm_80-")
    assert add(plan, x, x, x, capability=90)["kernel"].startswith("add-sm_90-")


def test_a_gpu_the_wheel_lacks_gets_the_build_command(plan, installed):
    x = torch.randn(256, dtype=H)
    # sm_90 cubins are sm_90a: they run on compute capability 9.0 only.
    with pytest.raises(installed.NotBuiltError, match="sm_100") as caught:
        add(plan, x, x, x, capability=100)
    message = str(caught.value)
    assert "sm_80, sm_90" in message
    assert "ntops-aot build --arch sm_80,sm_90,sm_100 --ops add,comparison,mm,softmax" in message


def test_dtypes_the_wheel_lacks(plan, installed):
    x = torch.randn(256)
    with pytest.raises(installed.NotBuiltError, match="--dtypes fp16,fp32"):
        add(plan, x, x, x)
    x = torch.randn(256, dtype=torch.float64)
    with pytest.raises(installed.NotBuiltError, match="add takes fp16, bf16, fp32 only"):
        add(plan, x, x, x)


def test_ndims_the_wheel_lacks(plan, installed):
    x = torch.randn(8, 16, 32, dtype=H)[:, :7, :9]  # three dims that cannot merge
    with pytest.raises(installed.NotBuiltError, match="--ndims 1,2,4"):
        add(plan, x, x, torch.empty(8, 7, 9, dtype=H))


def test_bad_arguments(plan):
    x = torch.randn(4, 5, dtype=H)
    cases = [
        (ValueError, "broadcast", lambda: add(plan, x, torch.randn(3, 5, dtype=H), x)),
        (
            ValueError,
            "but the inputs broadcast to",
            lambda: add(plan, x, x, torch.empty(4, 6, dtype=H)),
        ),
        (TypeError, "one dtype", lambda: add(plan, x, x.float(), x)),
        (ValueError, "stride-0", lambda: add(plan, x, x, torch.empty(1, 5, dtype=H).expand(4, 5))),
        (TypeError, "torch.Tensor", lambda: add(plan, x, [1.0], x)),
        (TypeError, "number", lambda: add(plan, x, x, x, alpha="2")),
        (TypeError, "takes 4 arguments", lambda: plan("add-other=tensor", 90, x, x, x)),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()


def test_outputs_may_alias_inputs_only_element_for_element(plan):
    x = torch.randn(64, 64, dtype=H)
    assert add(plan, x, x, x)["kernel"].startswith("add-sm_90-fp16-nd1-other=tensor/")  # in place
    flat = x.view(-1)
    with pytest.raises(ValueError, match="overlap in memory"):
        add(plan, flat[:-1], flat[:-1], flat[1:])
    with pytest.raises(ValueError, match="overlap in memory"):
        add(plan, x, x, x.t())
    with pytest.raises(ValueError, match="overlap in memory"):
        plan("mm-fp32_precision=tf32", 90, x, x, x)  # no in-place matmul
    evens, odds = x[:, ::2], x[:, 1::2]  # interleaved, not one element shared
    assert add(plan, evens, evens, odds)["kernel"].startswith("add-sm_90-fp16-nd")


def test_outputs_are_allocated_in_the_dtype_the_kernel_writes(plan):
    x, row = torch.randn(6, 42, 123, dtype=H), torch.randn(123, dtype=H)
    # Allocated to the broadcast shape; bool for comparisons.
    assert add(plan, x, row, None)["kernel"].startswith("add-sm_90-fp16-nd2-other=tensor/")
    eq = 0  # the comparison kernel's code for eq
    chosen = plan("comparison-other=tensor", 90, x, row, eq, None)
    assert chosen["kernel"].startswith("comparison-sm_90-fp16-nd2")
    chosen = plan("comparison-other=scalar", 90, x, 0.5, eq, None)
    assert chosen["kernel"].startswith("comparison-sm_90-fp16-nd1")
    chosen = plan("softmax", 90, x.transpose(0, 1), None)  # allocated like the input: dense
    assert chosen["ndim"] == 2
    # An out= of another dtype gets the bools through a copy, as torch casts them.
    out = torch.empty_like(x)
    chosen = plan("comparison-other=tensor", 90, x, x, eq, out)
    assert chosen["params"][-1] != out.data_ptr()
    plan("comparison-other=tensor", 90, out, row, eq, out)  # into its own input: torch allows it
    with pytest.raises(ValueError, match="overlap in memory"):  # partly: torch refuses
        plan("comparison-other=tensor", 90, out, out[:1], eq, out)


def test_empty_outputs_launch_nothing(plan):
    empty = torch.empty(0, 7, dtype=H)
    chosen = add(plan, empty, empty, empty)
    assert chosen["empty"]
    assert chosen["grid"] == 0


def test_rows_merge_their_leading_dims_only(plan):
    x = torch.randn(6, 42, 123, dtype=H)
    chosen = plan("softmax", 90, x, torch.empty_like(x))
    assert chosen["kernel"] == "softmax-sm_90-fp16-nd2/i32-u11"
    assert chosen["grid"] == 6 * 42
    vector = torch.randn(4096, dtype=H)
    chosen = plan("softmax", 90, vector, torch.empty_like(vector))
    assert chosen["kernel"] == "softmax-sm_90-fp16-nd2/i32-u11-a16"
    assert chosen["grid"] == 1
    transposed = torch.randn(42, 6, 128, dtype=H).transpose(0, 1)
    assert plan("softmax", 90, transposed, torch.empty_like(transposed))["ndim"] == 2


def test_matmul_layouts(plan):
    a, b, out = (
        torch.randn(2048, 64, dtype=H),
        torch.randn(64, 512, dtype=H),
        torch.empty(2048, 512, dtype=H),
    )
    key = "mm-fp32_precision=tf32"
    chosen = plan(key, 90, a, b, out)
    # (prefill and prefill-wide chose alike: one kernel serves both)
    assert chosen["kernel"].startswith("mm-sm_90-fp16-nd2-fp32_precision=tf32/i32-u111-a16@")
    assert "prefill" in chosen["kernel"].split("@")[1].split("+")
    # Prefill rows: 128x256 tiles, persistent programs (at most one per multiprocessor).
    assert chosen["grid"] == (2048 // 128) * (512 // 256)
    assert chosen["scratch"] > 0  # TMA descriptors, made per program on Hopper
    assert plan(key, 80, a, b, out)["scratch"] == 0  # no TMA before Hopper
    column_major = b.t().contiguous().t()
    assert "/i32-u101-a16@prefill" in plan(key, 90, a, column_major, out)["kernel"]
    odd = torch.randn(37, 23, dtype=H), torch.randn(23, 29, dtype=H), torch.empty(37, 29, dtype=H)
    assert plan(key, 90, *odd)["kernel"].endswith("/i32-u111")  # the fallbacks serve all rows
    strided = torch.randn(74, 46, dtype=H)[::2, ::2]
    assert plan(key, 90, strided, odd[1], odd[2])["kernel"].endswith("/i32")
    # An empty inner dim still launches: the product is all zeros.
    no_inner = plan(key, 90, torch.empty(5, 0, dtype=H), torch.empty(0, 7, dtype=H), out[:5, :7])
    assert no_inner["grid"] == 1
    assert not no_inner["empty"]


def test_expanded_operands_stay_off_the_tma_kernels(plan):
    """An operand read through TMA descriptors (SPACE.descriptors) that is expanded (a
    dim of stride 0 and size past 1: one row broadcast to 2048) takes a kernel that
    reads it by pointer: a descriptor cannot step by 0 bytes (the aligned prefill
    kernel read garbage). Its contiguous copy, and a stride 0 on a dim of size 1, keep
    the aligned kernel."""
    key = "mm-fp32_precision=tf32"
    row, b = torch.randn(1, 64, dtype=H), torch.randn(64, 512, dtype=H)
    out = torch.empty(2048, 512, dtype=H)
    expanded = plan(key, 90, row.expand(2048, 64), b, out)["kernel"]
    assert "/i32-u111-a16" not in expanded
    assert expanded.startswith("mm-sm_90-fp16-nd2")
    copied = plan(key, 90, row.expand(2048, 64).contiguous(), b, out)["kernel"]
    assert "/i32-u111-a16@" in copied
    one_row = torch.randn(64, 1, dtype=H).expand(64, 512)  # columns expanded: other's dim 1
    assert "-a16" not in plan(key, 90, row.expand(2048, 64).contiguous(), one_row, out)["kernel"]
    assert "-a16" in plan(key, 90, row, b, out[:1])["kernel"]  # size 1: any stride serves


@pytest.mark.parametrize(
    ("rows", "columns", "bucket"),
    [
        *((1, 1024, "decode"), (16, 4096, "decode"), (16, 4112, "decode-wide")),
        *((17, 1024, "small"), (32, 4096, "small"), (32, 4112, "small-wide")),
        *((64, 4096, "batched"), (33, 28672, "batched-wide"), (65, 1024, "medium")),
        *((128, 4112, "medium-wide"), (129, 4096, "large"), (192, 6144, "large-mid")),
        *((193, 4096, "larger"), (256, 8192, "larger-mid"), (256, 8208, "larger-wide")),
        *((257, 1024, "chunk"), (512, 6144, "chunk-wide"), (513, 1024, "prefill")),
        *((2048, 1024, "prefill"), (2048, 6144, "prefill-wide")),
    ],
)
def test_matmul_rows_and_columns_pick_the_bucket_in_c(plan, rows, columns, bucket):
    """The launcher picks the kernel built for the call's bucket of rows and columns
    (the op's TUNING.key and key2) with no Python in the way; the unaligned fallbacks
    serve every size."""
    x, w = torch.empty(rows, 4096, dtype=H), torch.empty(columns, 4096, dtype=H)
    out = torch.empty(rows, columns, dtype=H)
    chosen = plan("mm-fp32_precision=tf32", 90, x, w.t(), out)
    spec, label = chosen["kernel"].rsplit("/", 1)[1].split("@")
    assert spec == "i32-u101-a16"
    # Buckets that chose one configuration and join into a rectangle share kernels:
    # "@small+small-wide".
    assert bucket in label.split("+")
    assert chosen["bucket_keys"] == (rows, columns)
    if bucket.startswith("prefill"):  # persistent: one program per multiprocessor at most
        tiles = -(-rows // 128) * (columns // 256)
        assert chosen["grid"] == min(tiles, 132)
    odd = torch.randn(rows, 4095, dtype=H)[:, :4094]
    fallback = plan("mm-fp32_precision=tf32", 90, odd, w[:, :4094].t(), out)
    assert "@" not in fallback["kernel"]


def test_split_grids_fill_the_last_wave():
    """Split-K configurations launch the tiles times the fewest parts (up to the
    split) that fill the programs' last wave over the multiprocessors to 90%, else the
    parts that fill it most."""
    from ntops_aot.aot.compile import codegen
    from ntops_aot.aot.declare.space import Config

    grid = codegen._launched("tiles", Config({}, 4, 4, split=4))
    names = {"multiprocessors": 132, "parts": parts}
    # 96 tiles: one wave 73% full, 384 programs fill 3 waves to 97%; 200 tiles: 2
    # waves 76% full, in 3 parts 5 waves 91% full; 20 tiles: never 90%, 4 parts fill most.
    for tiles, programs in ((20, 80), (40, 120), (64, 128), (96, 384), (200, 600), (132, 132)):
        assert eval(grid, names | {"tiles": tiles}) == programs
    for tiles in range(1, 600):
        for most in (1, 2, 4, 8):
            chosen = parts(tiles, 132, most)
            fills = [tiles * p / (-(-tiles * p // 132) * 132) for p in range(1, most + 1)]
            full = [p for p, fill in enumerate(fills, 1) if fill >= 0.9]
            assert chosen == (full[0] if full else fills.index(max(fills)) + 1)


def test_an_op_the_wheel_lacks_names_the_command_that_adds_it(installed):
    with pytest.raises(installed.NotBuiltError) as caught:
        installed.gelu(torch.randn(3, dtype=H))
    message = str(caught.value)
    assert message.startswith("ntops_prebuilt.gelu (approximate=none): no prebuilt kernel")
    assert "This wheel has no gelu kernels; it has add, comparison, mm, softmax." in message
    assert (
        "ntops-aot build --arch sm_80,sm_90 --ops add,comparison,mm,softmax,gelu --dtypes fp16"
        in message
    )


def test_the_wheel_writes_commands_as_ntops_aot_does(installed):
    """The manifest keeps the build's options as config.command_line writes them; the
    wheel (which has no ntops-aot) writes its suggestions from them, with the change."""
    built = installed.manifest()["build"]
    options = {"arch": ("sm_80", "sm_90"), "ops": ("add", "comparison", "mm", "softmax")}
    options.update(dtypes=("fp16",), ndims=(1, 2), tuning=False)
    written = config.command_line("build", options)
    assert written == (
        "ntops-aot build --arch sm_80,sm_90 --ops add,comparison,mm,softmax --dtypes fp16 "
        "--ndims 1,2 --no-tuning"
    )
    with pytest.raises(installed.NotBuiltError) as caught:
        installed.set_default_num_warps(2)
    assert str(caught.value).endswith(f": {written} --num-warps 2")
    assert [list(pair) for pair in config.command_words(options)] == built["command"]


class _Subclass(torch.Tensor):
    """A __torch_function__ subclass: its memory is its data."""


def test_tensors_whose_memory_is_not_their_data_are_refused(plan):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(4, 5, dtype=H)
    with FakeTensorMode():
        fake = torch.empty(4, 5, dtype=H)
    for tensor in (fake, Wrapper(x)):
        with pytest.raises(TypeError, match=r"add: other is a .*overrides __torch_dispatch__"):
            add(plan, x, tensor, None)
    # Subclasses that keep their data in their own memory are read as tensors.
    for tensor in (x.as_subclass(_Subclass), torch.nn.Parameter(x.clone())):
        assert add(plan, x, tensor, None)["params"][2] == tensor.data_ptr()


def test_layouts_without_strides_are_refused_by_name(plan):
    x = torch.randn(4, 5, dtype=H)
    nested = torch.nested.nested_tensor([torch.randn(2, 5, dtype=H), torch.randn(3, 5, dtype=H)])
    for tensor, words in ((x.to_sparse(), "non-strided"), (nested, "nested")):
        with pytest.raises(TypeError, match=f"add: other is a {words} tensor"):
            add(plan, x, tensor, None)


def test_negative_views_are_read_and_written_through_copies(plan):
    x = torch.randn(4, 5, dtype=H)
    negative = torch._neg_view(x)
    chosen = add(plan, x, negative, None)
    assert chosen["params"][0] == x.data_ptr()
    assert chosen["params"][2] != x.data_ptr()  # a resolved copy holds -x
    out = torch.empty(4, 5, dtype=H)
    chosen = add(plan, x, x, torch._neg_view(out))
    assert chosen["params"][4] != out.data_ptr()  # written into a copy, then copied


def test_empty_results_of_any_rank(plan):
    """torch gives some empty tensors stride-0 dims: nothing is written to race on."""
    chosen = add(plan, torch.randn(7, 0, 31, dtype=H), torch.randn(0, 31, dtype=H), None)
    assert chosen["empty"]
    out = torch.empty(7, 0, 31, dtype=H)
    assert add(plan, torch.randn(7, 0, 31, dtype=H), torch.randn(0, 31, dtype=H), out)["empty"]


def test_an_output_an_input_is_broadcast_from_is_refused(plan):
    o = torch.randn(4, 5, dtype=H)
    with pytest.raises(ValueError, match="overlap in memory"):
        add(plan, o, o[:1], o)
    # As in torch: an expanded input, or a column of the output, is not dense, and passes.
    assert not add(plan, o, o[:1].expand(4, 5), o)["empty"]
    assert not add(plan, o[:, :1], o, o)["empty"]


def test_writes_autograd_or_inference_mode_would_refuse(plan):
    x = torch.randn(4, 5, dtype=H)
    leaf = torch.randn(4, 5, dtype=H, requires_grad=True)
    with pytest.raises(RuntimeError, match="add: input requires grad"):
        add(plan, leaf, x, torch.empty(4, 5, dtype=H))
    with pytest.raises(RuntimeError, match="add: output requires grad"):
        add(plan, x, x, leaf)
    with torch.no_grad():
        add(plan, leaf, x, leaf)
    assert add(plan, leaf, x, None)["grid"] > 0  # no write into a given tensor
    with torch.inference_mode():
        frozen = torch.empty(4, 5, dtype=H)
        add(plan, x, x, frozen)
    with pytest.raises(RuntimeError, match="add: output is an inference tensor"):
        add(plan, x, x, frozen)


def test_functions_that_share_a_kernel_are_named_in_what_they_raise(plan, installed):
    """eq .. ge call one kernel (kernels/comparison.py) through launcher groups of their
    own names, so what a call gets back names the function the caller made."""
    x = torch.randn(4, 5, dtype=H)
    lt = 2  # the comparison kernel's code for lt
    with pytest.raises(ValueError, match=r"^lt: other has shape \(7,\)"):
        plan("lt-other=tensor", 90, x, torch.randn(7, dtype=H), lt, None)
    with pytest.raises(installed.NotBuiltError, match=r"ntops_prebuilt\.lt \(other=tensor\)"):
        plan("lt-other=tensor", 100, x, x, lt, None)
    chosen = plan("ge-other=scalar", 90, x, 0.5, 5, None)
    assert chosen["kernel"].startswith("comparison-sm_90-fp16-nd1-other=scalar/")


def test_each_function_passes_its_kernel_the_constant_it_binds(installed):
    import inspect

    source = inspect.getsource(installed._functions)
    for code, name in enumerate(("eq", "ne", "lt", "le", "gt", "ge")):
        function = source[source.index(f"\ndef {name}(") :].split("\ndef ")[1]
        assert f"input, other, {code}, out)" in function, name


def test_views_the_launcher_makes_plan_as_torch_views_do(plan):
    """A view given as (tensor, sizes, dims), each dim's stride a factor of one of the
    tensor's (rotary's pairs and broadcast tables, attention's rows), plans the launch
    its torch view plans: here a transposed slice, a broadcast row and pairs."""
    x = torch.randn(8, 6, dtype=H)[:, :4]
    y = torch.randn(4, dtype=H)
    out = torch.empty(4, 2, 4, dtype=H)
    viewed = add(
        plan, (x, (4, 2, 4), ((1, 1), (0, 4), (0, 1))), (y, (4, 2, 4), ((0, 1), (-1, 0), (-1, 0))),
        (out, (4, 2, 4), ((0, 1), (1, 1), (2, 1))),
    )  # fmt: skip
    strided = add(
        plan, x.as_strided((4, 2, 4), (1, 24, 6)), y.as_strided((4, 2, 4), (1, 0, 0)), out
    )
    assert viewed == strided


def test_views_past_their_tensor_or_malformed_are_refused(plan):
    x, y, out = (torch.randn(4, 8, dtype=H) for _ in range(3))
    whole = ((0, 1), (1, 1))
    with pytest.raises(ValueError, match="reaches past"):
        add(plan, (x, (4, 8), ((0, 1), (1, 2))), y, out)  # every other column
    with pytest.raises(ValueError, match="reaches past"):
        add(plan, x, (y, (5, 8), whole), out)
    with pytest.raises(TypeError, match="a view is"):
        add(plan, (x, (4, 8), whole[:1]), y, out)
    with pytest.raises(TypeError, match="view dim 1"):
        add(plan, (x, (4, 8), ((0, 1), (2, 1))), y, out)  # no dim 2
    with pytest.raises(TypeError, match="view dim 0"):
        add(plan, (x, (-4, 8), whole), y, out)


def test_real_views_of_complex_tensors_keep_their_pairs_last(plan):
    """sgn's complex kernels (kernels/sgn.py) read torch.view_as_real's pairs side by
    side in the flattened tensor: however a complex tensor is laid out, coalescing
    keeps the pairs' dim last, at stride 1 in every tensor (a unit-stride kernel), and
    of an even size (whole pairs). On add's fp16 kernels, over the real views of
    complex tensors of 10 x 8 (float16 (10, 8, 2) tensors, as complex32's would be)."""
    pairs = torch.randn(10, 8, 2, dtype=H)
    for view, ndim in (
        (pairs, 1),
        (pairs.transpose(0, 1), 1),  # a transposed complex tensor: dense in another order
        (pairs[:, :5], 2),
        (pairs[::2], 2),
        (pairs[:1].expand(10, -1, -1), 2),  # an expanded one
    ):
        out = torch.empty_like(view) if view.stride(0) else torch.empty(view.shape, dtype=H)
        chosen = add(plan, view, view, out)
        assert chosen["ndim"] == ndim
        assert chosen["kernel"].rsplit("/", 1)[1].startswith("i32-u" + str(ndim - 1) * 3)
        assert chosen["params"][ndim] % 2 == 0  # the first tensor's last size
