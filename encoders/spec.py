"""EncoderSpec: an encoder by name with typed, validated options.

One grammar for every way an encoder is named: `propdex index --encoder
proposition:dims=64`, eval's `--systems proposition:dims=64+bm25` and
`load_encoder("proposition", dims=64)` all parse here, once. Options are
the encoder class's constructor arguments (plus `title`, `max_length` and
`batch_size`, which every encoder takes); values given as text are
converted to the type the constructor declares, so `query_segments="0"` is
False, never a truthy string, and an unknown option is an error naming the
ones that exist.
"""
from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GRAMMAR = "NAME[:option=value...]"
# Every encoder takes these; the rest come from its constructor.
COMMON = {"title": bool, "max_length": int | None, "batch_size": int}
# Constructor arguments that are not options: the backbone, and the digests
# an index records of the weights it was built with (read back from it).
_INTERNAL = {"self", "backbone"}


@dataclass(frozen=True)
class EncoderSpec:
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        types_ = option_types(self.name)
        typed = {}
        for key, value in self.options.items():
            if key not in types_:
                known = ", ".join(sorted(k for k in types_ if not k.endswith("_sha256")))
                raise ValueError(f"encoder {self.name!r} has no option {key!r}; its options: {known}")
            typed[key] = convert(value, types_[key], f"{self.name}:{key}")
        object.__setattr__(self, "options", types.MappingProxyType(typed))

    @classmethod
    def parse(cls, text: str) -> "EncoderSpec":
        """`proposition:dims=64:standalone=1` (the eval system grammar)."""
        return cls(*split_spec(text, "encoder"))

    def __str__(self) -> str:
        return ":".join([self.name, *(f"{k}={_text(v)}" for k, v in self.options.items())])


def split_spec(text: str, what: str = "spec") -> tuple[str, dict[str, str]]:
    """`NAME[:option=value...]` as the name and its options, still text
    (the grammar of encoder specs here and of eval's systems)."""
    name, _, rest = text.strip().partition(":")
    options = {}
    for item in rest.split(":") if rest else ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"{what} spec {text!r}: option {item!r} is not option=value (grammar: {GRAMMAR})")
        options[key] = value
    if not name:
        raise ValueError(f"{what} spec {text!r} names no {what} (grammar: {GRAMMAR})")
    return name, options


def option_types(name: str) -> dict[str, Any]:
    """Option -> declared type for the encoder called `name`."""
    from . import encoder_class  # the registry; resolving it imports no model code

    cls = encoder_class(name)
    hints = typing.get_type_hints(cls.__init__)
    params = inspect.signature(cls.__init__).parameters
    return {**COMMON, **{k: hints.get(k, str) for k in params if k not in _INTERNAL}}


def convert(value: Any, kind: Any, what: str) -> Any:
    """`value` as `kind` (bool, int, float, str or a union of them with None)."""
    choices = typing.get_args(kind) if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union else (kind,)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "") and type(None) in choices):
        if type(None) in choices:
            return None
        raise ValueError(f"{what} needs a value")
    # Text is tried as the narrowest type first: "3" is an int where int is allowed.
    order = [t for t in (bool, int, float, str) if t in choices]
    errors = []
    for t in order:
        try:
            return _as(value, t)
        except (TypeError, ValueError) as e:
            errors.append(str(e))
    names = {bool: "a yes/no value (1/0, true/false)", int: "an integer", float: "a number", str: "text"}
    expected = " or ".join(names[t] for t in order) or str(kind)
    raise ValueError(f"{what}: expected {expected}, got {value!r}")


def _as(value: Any, t: type) -> Any:
    if t is bool:
        from . import flag

        return flag(value)
    if isinstance(value, bool):
        raise TypeError("a bool is not a number or text")
    if t is int:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("not an integer")
        return int(value) if not isinstance(value, str) else int(value.strip())
    if t is float:
        return float(value)
    if not isinstance(value, str):
        raise TypeError("not text")
    return value


def _text(value: Any) -> str:
    return {True: "1", False: "0", None: "none"}.get(value, str(value)) if isinstance(value, (bool, type(None))) else str(value)
