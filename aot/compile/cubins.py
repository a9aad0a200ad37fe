"""The compile stage's second half: Triton source -> cubin, in-process, for the target arch.

The result is a `CompiledKernel`: the cubin and everything a launcher needs to
call it (the runtime parameters left after constants are folded, shared memory,
warps). Kernels that need something a prebuilt launch cannot provide fail here,
with the kernel's id (the build adds the command that reproduces it alone).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import linecache
import os
import sys
import types
from typing import Any

from ..declare.arguments import Arg
from ..declare.space import EVERY, Range, Spec, Variant
from ..errors import CompileError
from ..toolchain.compilers import Toolchain
from ..toolchain.targets import TARGETS, Target
from .codegen import GeneratedKernel, Param

# Launch kinds the launcher does not make: kernels Triton compiles for cooperative or
# programmatic-dependent launches are refused rather than launched wrongly. (Clusters,
# num_ctas > 1, and global scratch memory it does provide.)
_PLAIN_LAUNCH = {"launch_cooperative_grid": False, "launch_pdl": False}


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    variant: Variant
    spec: Spec
    args: tuple[Arg, ...]
    function: str  # the cubin's entry point
    cubin: bytes
    ptx: str  # the same kernel as PTX: shipped only when the build asks for it (--ptx)
    target: str  # "sm_90a": what the cubin runs on ("a": that exact compute capability)
    params: tuple[Param, ...]  # runtime parameters, constants removed, in order
    types: tuple[str, ...]  # Triton type of each runtime parameter
    scratch_params: int  # trailing pointer parameters Triton adds: global, then profile scratch
    grid: str
    num_warps: int  # as compiled: warp-specialised kernels come back with more than asked
    num_stages: int
    shared: int  # bytes of dynamic shared memory
    scratch: int = 0  # bytes of global scratch per program (device-side TMA descriptors)
    scratch_align: int = 1
    workspace: tuple[int, int] = (0, 0)  # bytes per program, and of them zeroed (codegen's)
    num_ctas: int = 1  # programs per cluster
    # Which calls it serves: the inclusive ranges of its op's two bucket key sizes, and
    # (in a tuning wheel) which candidate configuration of that bucket it was built with.
    bucket: tuple[Range, Range] = (EVERY, EVERY)
    label: str = ""  # "@decode": the buckets it serves, when not all of them
    candidate: int = 0
    config: str = ""  # the configuration, as `Config.__str__` writes it

    @property
    def id(self) -> str:
        return f"{self.variant.id}/{self.spec.name}{self.label}"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()


def _deepest(error: BaseException) -> str:
    """What went wrong and where: Triton reports an error inside a called Triton
    function as the call site's error caused by the callee's, down to the line that
    failed, caused by what failed there; the outermost says neither."""
    located, chain = error, [error]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    located = next((e for e in reversed(chain) if hasattr(e, "src")), chain[-1])
    if located is chain[-1] or str(chain[-1]) in str(located):
        return str(located)
    return f"{located}\n{type(chain[-1]).__name__}: {chain[-1]}"


def compile_kernel(toolchain: Toolchain, kernel: GeneratedKernel) -> CompiledKernel:
    """Compile one specialisation for its arch."""
    target = TARGETS[kernel.variant.arch]
    with toolchain.target(target):
        return _compile(toolchain, target, kernel)


def _compile(toolchain: Toolchain, target: Target, kernel: GeneratedKernel) -> CompiledKernel:
    triton = toolchain.triton
    jit_function = _load(kernel)
    signature = dict(zip(jit_function.arg_names, kernel.signature, strict=True))
    # Constexpr parameters: unit strides (1) and the premake's constexpr tensors.
    constants = {
        param.name: 1 if param.kind == "stride" else param.value
        for param, type_ in zip(kernel.params, kernel.signature, strict=True)
        if type_ == "constexpr"
    }
    attrs = {(position,): [["tt.divisibility", 16]] for position in kernel.divisible}
    source = _source(triton, jit_function)(
        fn=jit_function, signature=signature, constexprs=constants, attrs=attrs
    )
    gpu_target = toolchain.gpu_target(target)
    options = triton.compiler.make_backend(gpu_target).parse_options(
        # Fusing a * b + c into one FMA is Triton's (and nvcc's) default; say so, so a
        # changed default in a later Triton cannot change the numbers silently.
        {
            "num_warps": kernel.num_warps,
            "num_stages": kernel.num_stages,
            "num_ctas": kernel.num_ctas,
            "enable_fp_fusion": True,
        }
    )
    try:
        compiled = triton.compile(source, target=gpu_target, options=options.__dict__)
    except Exception as error:
        raise CompileError(kernel.id, f"Triton failed: {_deepest(error)}") from error
    finally:
        sys.modules.pop(jit_function.__module__, None)  # `_load`'s, compiled
    _check_launchable(kernel, compiled.metadata)
    runtime = [i for i, type_ in enumerate(kernel.signature) if type_ != "constexpr"]
    metadata = compiled.metadata
    return CompiledKernel(
        variant=kernel.variant,
        spec=kernel.spec,
        args=kernel.args,
        function=compiled.metadata.name,
        cubin=compiled.asm["cubin"],
        ptx=compiled.asm["ptx"],
        target=toolchain.cubin_arch(target),
        params=tuple(kernel.params[i] for i in runtime),
        types=tuple(kernel.signature[i] for i in runtime),
        scratch_params=sum(
            hasattr(metadata, field) for field in ("global_scratch_size", "profile_scratch_size")
        ),
        grid=kernel.grid,
        num_warps=metadata.num_warps,
        num_stages=metadata.num_stages,
        shared=metadata.shared,
        scratch=getattr(metadata, "global_scratch_size", 0),
        scratch_align=getattr(metadata, "global_scratch_align", 1) or 1,
        workspace=kernel.workspace,
        num_ctas=getattr(metadata, "num_ctas", 1),
    )


def _source(triton: Any, jit_function: Any) -> Any:
    """The AST source class of a kernel: Gluon's for `@gluon.jit` (a plain kernel's,
    declare/plain.py), Triton's otherwise."""
    from triton.experimental.gluon import GluonASTSource, GluonJITFunction

    if isinstance(jit_function, GluonJITFunction):
        quiet_teardown()
        return GluonASTSource
    return triton.compiler.ASTSource


@functools.cache
def quiet_teardown() -> None:
    """After compiling Gluon, libtriton's teardown at interpreter exit reports IR
    objects its bindings leaked (nanobind, some 300 lines on stderr, in Triton 3.9);
    Triton's own compile workers silence the same report the same way: stderr to
    /dev/null once everything else has exited."""

    def silence() -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    atexit.register(silence)


def _load(kernel: GeneratedKernel) -> Any:
    """Turn the generated source into a JITFunction without writing it anywhere:
    Triton reads a kernel's source through `inspect`, which consults linecache."""
    digest = hashlib.sha256(kernel.source.encode()).hexdigest()
    filename = f"<ntops-aot {kernel.id} {digest}>"
    lines = kernel.source.splitlines(keepends=True)
    linecache.cache[filename] = (len(kernel.source), None, lines, filename)
    # A module of its own, registered: Gluon's aggregates resolve their annotations
    # through sys.modules[cls.__module__].
    module = types.ModuleType(f"ntops_aot_generated_{kernel.variant.op}_{digest[:16]}")
    sys.modules[module.__name__] = module
    exec(compile(kernel.source, filename, "exec"), module.__dict__)
    return getattr(module, kernel.function)


def _check_launchable(kernel: GeneratedKernel, metadata: Any) -> None:
    target = TARGETS[kernel.variant.arch]
    if metadata.shared > target.max_shared_mem:
        raise CompileError(
            kernel.id,
            f"the kernel needs {metadata.shared} bytes of shared memory; a block on "
            f"{target.name} gets at most {target.max_shared_mem}: choose smaller tiles or "
            "fewer stages in its kernel file",
        )
    if getattr(metadata, "profile_scratch_size", 0):
        raise CompileError(
            kernel.id,
            f"the kernel needs {metadata.profile_scratch_size} bytes of profile scratch "
            "memory per launch (Triton's instrumentation); prebuilt launchers pass none, so "
            "build without TRITON_* profiling settings",
        )
    for field, plain in _PLAIN_LAUNCH.items():
        value = getattr(metadata, field, plain)
        if value != plain:
            raise CompileError(
                kernel.id,
                f"Triton compiled it for {field}={value}; "
                f"prebuilt launchers only do {field}={plain}",
            )
