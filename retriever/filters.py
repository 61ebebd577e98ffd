"""Metadata filters: which documents a search may return (`where=`).

A filter maps metadata fields to conditions, all of which must hold:

- a value, or a list of values: the field holds any of them (a field that
  holds a list matches on any element): `{"team": ["web", "infra"]}`;
- operators: `{"year": {">=": 2020, "<": 2024}}`, every one holding. `==`
  and `in` keep a document whose field holds the value (any of the list);
  `!=` and `not in` keep every other document, those without the field
  included; `<`, `<=`, `>`, `>=` compare numbers with numbers and strings
  with strings (a value of the other kind never matches); `prefix` keeps
  strings that start with it: `{"path": {"prefix": "/notes/work/"}}`.

Every condition is answered from the store's metadata postings (one LMDB
key a field and value), so a filter acts inside stage 1 as an ID selector,
before any ranking: k matching documents give k hits. On the command line
(`--where`): FIELD=VALUE, FIELD!=VALUE, FIELD>=VALUE, FIELD>VALUE,
FIELD<=VALUE, FIELD<VALUE, FIELD^=PREFIX, VALUE read as JSON where it is
JSON (2021, true, ["a", "b"]) and as text otherwise.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from propdex.indexer.store import ShardStore, metadata_values, plain

if TYPE_CHECKING:
    from .loading import Shard

Scalar = str | int | float | bool | None
# Operator -> (what it tests against a stored value, whether it takes a list).
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda v, x: v < x, "<=": lambda v, x: v <= x, ">": lambda v, x: v > x, ">=": lambda v, x: v >= x,
    "prefix": lambda v, x: v.startswith(x),
}
OPERATORS = ("==", "!=", "in", "not in", *COMPARE)
# The command line's spelling of each operator, longest first so that >= is not read as >.
CLI_OPERATORS = (("!=", "!="), (">=", ">="), ("<=", "<="), ("^=", "prefix"), (">", ">"), ("<", "<"), ("=", "=="))
Where = dict[str, tuple[tuple[str, tuple[Scalar, ...]], ...]]


def parse_where(where: Mapping[str, Any] | None) -> Where | None:
    """A validated filter: field -> ((operator, values), ...); None: no filter.
    A malformed one is a ValueError naming the field."""
    if where is None:
        return None
    if not isinstance(where, Mapping):
        raise ValueError(f"where must map metadata fields to values, got {type(where).__name__}")
    out: Where = {}
    for field, condition in where.items():
        if not isinstance(field, str) or not field:
            raise ValueError(f"where: field names are non-empty strings, got {field!r}")
        if _parsed(condition):  # a filter parsed before (settings passed on)
            out[field] = condition
        elif isinstance(condition, Mapping):
            if not condition:
                raise ValueError(f"where[{field!r}]: give at least one operator of {', '.join(OPERATORS)}")
            out[field] = tuple(_condition(field, op, value) for op, value in condition.items())
        else:
            out[field] = (_condition(field, "in", condition),)
    return out or None


def _parsed(condition: Any) -> bool:
    return isinstance(condition, tuple) and bool(condition) and all(
        isinstance(c, tuple) and len(c) == 2 and c[0] in OPERATORS and isinstance(c[1], tuple) for c in condition)


def _condition(field: str, op: Any, value: Any) -> tuple[str, tuple[Scalar, ...]]:
    if op not in OPERATORS:
        raise ValueError(f"where[{field!r}]: unknown operator {op!r}; choose from {', '.join(OPERATORS)}")
    # numpy values and dates as the store keeps them; a tuple or array becomes a list
    value = plain(list(value) if isinstance(value, (set, frozenset)) else value)
    values = value if isinstance(value, list) else [value]
    scalars = metadata_values(values)
    if len(scalars) != len(values) or not values:
        raise ValueError(f"where[{field!r}]: give a string, number, bool or null, or a non-empty list of them; got {value!r}")
    if op in COMPARE:
        if len(scalars) != 1 or isinstance(scalars[0], bool) or scalars[0] is None:
            raise ValueError(f"where[{field!r}][{op!r}]: compares with one number or string, got {value!r}")
        if op == "prefix" and not isinstance(scalars[0], str):
            raise ValueError(f"where[{field!r}]['prefix']: a prefix is a string, got {value!r}")
    op = {"==": "in", "!=": "not in"}.get(op, op)
    return op, tuple(scalars)


def allowed_per_shard(shards: Sequence["Shard"], where: Where | None) -> list[np.ndarray | None]:
    """Per shard, a bool mask of the documents a search may return: live
    ones that meet every condition of `where` (None: all of them)."""
    out = []
    for shard in shards:
        mask = shard.live
        for field, conditions in (where or {}).items():
            match = allowed_documents(shard.store, field, conditions)
            mask = match if mask is None else mask & match
        out.append(mask)
    return out


def allowed_documents(store: ShardStore, field: str, conditions: tuple[tuple[str, tuple[Scalar, ...]], ...]) -> np.ndarray:
    """Bool mask of the shard's documents that meet every condition on `field`."""
    mask = np.ones(len(store), dtype=bool)
    for op, values in conditions:
        hit = np.zeros(len(store), dtype=bool)
        if op in ("in", "not in"):
            hit[store.matching(field, values)] = True
            if op == "not in":
                hit = ~hit
        else:
            test, bound = COMPARE[op], values[0]
            for value, docs in store.field_values(field):
                if _comparable(value, bound) and test(value, bound):
                    hit[docs] = True
        mask &= hit
    return mask


def _comparable(value: Scalar, bound: Scalar) -> bool:
    """Numbers compare with numbers (bools are not numbers here), strings with strings."""
    if isinstance(bound, str):
        return isinstance(value, str)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def cli_clause(text: str) -> tuple[str, str, Any]:
    """(field, operator, value) of a command-line clause such as year>=2020."""
    for spelled, op in CLI_OPERATORS:
        field, sep, value = text.partition(spelled)
        if sep and field and not any(c in field for c in "=!<>^"):
            try:
                return field, op, json.loads(value)
            except json.JSONDecodeError:
                return field, op, value
    raise ValueError(f"expected FIELD=VALUE (or !=, >=, >, <=, <, ^= for a prefix), got {text!r}")


def from_clauses(clauses: list[tuple[str, str, Any]]) -> dict[str, Any] | None:
    """A filter from command-line clauses; clauses on one field must all hold."""
    where: dict[str, dict[str, Any]] = {}
    for field, op, value in clauses:
        ops = where.setdefault(field, {})
        if op in ops:
            raise ValueError(f"--where gives {field}{op} twice")
        ops[op] = value
    return where or None
