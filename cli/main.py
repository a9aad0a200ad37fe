"""`ntops-aot`: parse, call ntops_aot.aot, print. Each kind of failure has its own
exit code (see aot/errors.py); 0 means the wheel was written."""

from __future__ import annotations

import functools
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import click

from ntops_aot.aot import build as pipeline
from ntops_aot.aot.errors import BuildError, UsageError
from ntops_aot.aot.space import Variant


def _reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BuildError as error:
            click.echo(f"ntops-aot: error: {error}", err=True)
            sys.exit(error.exit_code)

    return wrapper


def _words(value: str | None) -> tuple[str, ...] | None:
    return tuple(word.strip() for word in value.split(",") if word.strip()) if value else None


def _ints(value: str | None) -> tuple[int, ...] | None:
    words = _words(value)
    if words is None:
        return None
    try:
        return tuple(int(word) for word in words)
    except ValueError as error:
        raise UsageError(f"--ndims takes comma-separated integers, not {value!r}") from error


def _options(
    arch: str, ops: str, dtypes: str | None, ndims: str | None, **rest: Any
) -> pipeline.BuildOptions:
    return pipeline.BuildOptions(
        arches=_words(arch) or ("all",),
        ops=_words(ops) or ("all",),
        dtypes=_words(dtypes),
        ndims=_ints(ndims),
        **rest,
    )


_selection = [
    click.option(
        "--arch",
        default="sm_90",
        show_default=True,
        help="Arches, comma-separated (sm_80,sm_90) or 'all'.",
    ),
    click.option(
        "--ops",
        default="all",
        show_default=True,
        help="Ops, comma-separated names or globs ('soft*'), or 'all'.",
    ),
    click.option("--dtypes", default=None, help="Only these dtypes (fp16,bf16,fp32)."),
    click.option("--ndims", default=None, help="Only these ndims (1,2,3)."),
    click.option(
        "--build-dir",
        type=click.Path(path_type=pathlib.Path),
        default=pathlib.Path("generated"),
        show_default=True,
        help="Where generated sources, cubins and caches go.",
    ),
]


def _with_selection(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_selection):
        command = option(command)
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ntops-aot", prog_name="ntops-aot")
def main() -> None:
    """Build ninetoothed kernels ahead of time into a zero-JIT, torch-compatible wheel."""


@main.command()
@_with_selection
@click.option(
    "--out",
    type=click.Path(path_type=pathlib.Path),
    default=pathlib.Path("dist"),
    show_default=True,
    help="Directory for the wheel.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=os.cpu_count() or 1,
    show_default="cores",
    help="Parallel compile processes.",
)
@click.option("--num-warps", type=int, help="Warps of every kernel (default: each kernel file's).")
@click.option(
    "--num-stages", type=int, help="Pipeline stages of every kernel (default: each kernel file's)."
)
@click.option(
    "--max-num-configs",
    type=int,
    help="Cap on tile configurations per variant (kernel files declare one each).",
)
@_reports_errors
def build(
    arch: str,
    ops: str,
    dtypes: str | None,
    ndims: str | None,
    build_dir: pathlib.Path,
    out: pathlib.Path,
    jobs: int,
    num_warps: int | None,
    num_stages: int | None,
    max_num_configs: int | None,
) -> None:
    """Compile every selected variant and write the ntops_prebuilt wheel."""
    options = _options(
        arch,
        ops,
        dtypes,
        ndims,
        build_dir=build_dir,
        out_dir=out,
        jobs=jobs,
        num_warps=num_warps,
        num_stages=num_stages,
        max_num_configs=max_num_configs,
    )

    def progress(done: int, total: int, variant: Variant) -> None:
        click.echo(f"[{done}/{total}] {variant.id}", err=True)

    result = pipeline.build(options, progress)
    size = result.wheel.stat().st_size
    click.echo(
        f"{result.wheel}: {len(result.variants)} variants, {len(result.kernels)} kernels, "
        f"{size / 1e6:.1f} MB, {result.seconds:.1f} s"
    )


@main.command("list")
@_with_selection
@_reports_errors
def list_(
    arch: str, ops: str, dtypes: str | None, ndims: str | None, build_dir: pathlib.Path
) -> None:
    """Print the selected ops' variant ids, one a line, without building."""
    _, _, variants = pipeline.plan(_options(arch, ops, dtypes, ndims, build_dir=build_dir))
    for variant in variants:
        click.echo(variant.id)


if __name__ == "__main__":
    main()
