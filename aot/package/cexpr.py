"""Launch grids as C: ninetoothed's grid is a Python expression over the kernel's
size parameters; the launcher evaluates it per call, in 64-bit integers with
Python's floor-division semantics."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ..errors import UnsupportedKernel

_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_FUNCTIONS = {ast.FloorDiv: "nt_floordiv", ast.Mod: "nt_floormod"}
_CALLS = {"min": ("nt_min", 2), "max": ("nt_max", 2), "parts": ("nt_parts", 3)}


def to_c(expression: str, names: Mapping[str, str]) -> str:
    """Translate `expression`, mapping each name through `names`; anything beyond
    integer arithmetic is refused rather than guessed at."""
    return _emit(ast.parse(expression, mode="eval").body, names, expression)


def _emit(node: ast.AST, names: Mapping[str, str], whole: str) -> str:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return f"INT64_C({node.value})"
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"(-{_emit(node.operand, names, whole)})"
    if isinstance(node, ast.BinOp):
        left, right = _emit(node.left, names, whole), _emit(node.right, names, whole)
        if type(node.op) in _OPERATORS:
            return f"({left} {_OPERATORS[type(node.op)]} {right})"
        if type(node.op) in _FUNCTIONS:
            return f"{_FUNCTIONS[type(node.op)]}({left}, {right})"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and len(node.args) == _CALLS[node.func.id][1]
        and not node.keywords
    ):
        args = ", ".join(_emit(arg, names, whole) for arg in node.args)
        return f"{_CALLS[node.func.id][0]}({args})"
    raise UnsupportedKernel(
        f"launch grid {whole!r}: cannot evaluate {ast.unparse(node)!r} in the launcher "
        "(integer +, -, *, //, %, min, max and split K's parts over sizes and constants only)"
    )
