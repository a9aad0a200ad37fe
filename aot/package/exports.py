"""Stage 4 (package), Python side: the runtime functions of ordinary ops, rendered from the
torch side their kernel files declare (`API`, described in the manifest by
`api.describe`) through templates/functions.py.j2.

Only plain values leave this module: the template holds every line of Python. An
op with a hand-written wrapper (`Api.wrapper`) gets no function here.
"""

from __future__ import annotations

import json
import pprint
from collections.abc import Mapping, Sequence
from typing import Any

from ..declare.api import GIVEN, NONE, NUMBER, TENSOR
from .render import environment


def render(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The generated modules of a wheel with `manifest`, by file name."""
    return {"_functions.py": functions(manifest), "_ops.py": ops(manifest)}


def ops(manifest: Mapping[str, Any]) -> str:
    """`_ops.py`: the torch side and launcher groups of every op, as Python data."""
    infos = sorted(manifest["ops"].items())
    return (
        environment()
        .get_template("ops.py.j2")
        .render(
            apis=pprint.pformat([api for _, info in infos for api in info["apis"]], width=88),
            groups=pprint.pformat({op: info["groups"] for op, info in infos}, width=88),
            switches=pprint.pformat({op: info["switches"] for op, info in infos}, width=88),
            values=repr((TENSOR, NUMBER, GIVEN, NONE)),
            dtypes=pprint.pformat(dict(manifest["dtypes"]), width=88),
        )
    )


def functions(manifest: Mapping[str, Any]) -> str:
    """`_functions.py`: the runtime functions of the ordinary ops."""
    rendered = [
        _function(described, info["functions"].get(described["name"], info["groups"]))
        for _, info in sorted(manifest["ops"].items())
        for described in info["apis"]
        if described["wrapper"] is None
    ]
    refusals = [f["refuse"]["name"] for f in rendered if f["refuse"]]
    clashing = set(refusals) & {f["name"] for f in rendered} | {
        name for name in refusals if refusals.count(name) > 1
    }
    if clashing:
        raise ValueError(f"refusals named {sorted(clashing)} clash in _functions.py: rename them")
    return environment().get_template("functions.py.j2").render(functions=rendered)


def _function(described: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    name = described["name"]
    params = described["params"]
    picks = described["switches"]
    kinds = [switch for switch, pick in picks.items() if pick["rule"] == "kind"]
    values = [switch for switch, pick in picks.items() if pick["rule"] == "value"]
    if len(kinds) > 1 or len(values) > 1 or len(kinds) + len(values) < len(picks):
        raise ValueError(
            f"{name}: only one Tensor|Number and one str switch are rendered; "
            "give the op a wrapper (Api.wrapper)"
        )
    value = values[0] if values else None
    nullable = value is not None and _param(params, value)["type"] == "str?"
    return {
        "name": name,
        "table": f"_{name.upper()}",
        "signature": described["signature"][1:-1],
        "doc": described["doc"],
        "forward": ", ".join(_forward(params)),
        # What the function passes its kernel: its parameters by name, bound ones as
        # the constants they are.
        "kernel": [
            repr(described["bound"][name]) if name in described["bound"] else name
            for name in described["kernel"]
        ],
        "kind": kinds[0] if kinds else None,
        "value": value,
        "tables": _tables(f"_{name.upper()}", groups, kinds[0] if kinds else None, value, nullable),
        "accepted": _accepted(groups, value, nullable),
        "out": {"out": "out", "inplace": "input if inplace else None"}.get(
            described["writes"], "None"
        ),
        "refuse": described["refuse"],
    }


def _param(params: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    return next(param for param in params if param["name"] == name)


def _forward(params: Sequence[Mapping[str, Any]]) -> list[str]:
    """The call passing a function's own arguments on: `input, other, alpha=alpha`."""
    return [p["name"] if not p["keyword"] else f"{p['name']}={p['name']}" for p in params]


def _tables(
    table: str,
    groups: Mapping[str, Mapping[str, str]],
    kind: str | None,
    value: str | None,
    nullable: bool,
) -> dict[str, Any]:
    """The launcher groups by what picks them: `entries` [(argument, key or (tensor key,
    number key))] for a function with a value switch, else `keys`, and the Python
    expressions of the group a call takes (`tensor`, `number`, or `group`)."""

    def pick(switches: Mapping[str, str]) -> str:
        return "None" if nullable and switches[value] == NONE else json.dumps(switches[value])

    def keys(chosen: Mapping[str, Mapping[str, str]]) -> Any:
        if kind is None:
            return next(iter(chosen))
        by_kind = {switches[kind]: key for key, switches in chosen.items()}
        return (by_kind[TENSOR], by_kind[NUMBER])

    if value is None:
        found: dict[str, Any] = {"entries": None, "keys": keys(groups)}
        prefix = table
    else:
        arguments = list(dict.fromkeys(pick(switches) for switches in groups.values()))
        entries = [
            (argument, keys({k: s for k, s in groups.items() if pick(s) == argument}))
            for argument in arguments
        ]
        found = {"entries": entries, "keys": None}
        prefix = "groups"
    if kind is None:
        return found | {"group": prefix}
    if value is None:
        return found | {"tensor": f"{table}_TENSOR", "number": f"{table}_NUMBER"}
    return found | {"tensor": "groups[0]", "number": "groups[1]"}


def _accepted(groups: Mapping[str, Mapping[str, str]], value: str | None, nullable: bool) -> str:
    """What the value parameter takes, for its error message: "None, 'trunc' or 'floor'"."""
    if value is None:
        return ""
    seen: list[str] = []
    for switches in groups.values():
        picked = switches[value]
        shown = "None" if nullable and picked == NONE else repr(picked)  # in a message
        if shown not in seen:
            seen.append(shown)
    return ", ".join(seen[:-1]) + f" or {seen[-1]}" if len(seen) > 1 else seen[0]
