"""Option sets declared once: a frozen dataclass whose fields carry their help.

A settings class (SearchSettings, IndexSettings) declares each option once,
as `name: type = option(default, "help", ...)`: its type, default, help
text, the values it may take and its command-line spelling. Every surface is
derived from that declaration, so none can drift from another:

- `check(settings)` converts each value to the declared type (text from a
  flag, a URL or an eval spec becomes an int or a bool here) and enforces
  `choices` and `minimum`, naming the option in the error;
- `add_flags` writes the argparse flags, `given(args, cls)` reads them back
  (a flag not given is left out, so the class's default applies);
- the server builds its request models and GET parameters from `fields_of`;
- eval's system options are the field names.

A rule between options (hybrid or bm25, not both) stays in the class's
`__post_init__`, after `check`.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .spec import convert

@dataclass(frozen=True)
class Option:
    help: str
    choices: Sequence[Any] | None = None
    minimum: int | None = None
    flag: str | None = None  # default: --name-with-dashes
    cli: dict[str, Any] = dataclasses.field(default_factory=dict)  # argparse extras (type, action, metavar)


def option(default: Any, help: str, *, choices: Sequence[Any] | None = None, minimum: int | None = None,
           flag: str | None = None, **cli: Any) -> Any:
    """A dataclass field declaring one option (see the module's docstring);
    `cli` are argparse extras for its flag (type, action, metavar)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, choices, minimum, flag, cli)})


@dataclass(frozen=True)
class Declared:
    """One option of a settings class, its type resolved."""

    name: str
    kind: Any
    default: Any
    option: Option

    @property
    def flag(self) -> str:
        """--name-with-dashes, or --no-name for a switch that is on unless told."""
        negated = self.base is bool and self.default is True
        return self.option.flag or ("--no-" if negated else "--") + self.name.replace("_", "-")

    @property
    def base(self) -> Any:
        """The type without None: int for `int | None`."""
        args = [a for a in typing.get_args(self.kind) if a is not type(None)]
        return args[0] if len(args) == 1 else self.kind


def fields_of(cls: type) -> list[Declared]:
    """The declared options of a settings class, in order."""
    hints = typing.get_type_hints(cls)
    return [Declared(f.name, hints[f.name], f.default, f.metadata["option"]) for f in dataclasses.fields(cls)
            if "option" in f.metadata]


def check(settings: Any, skip: Sequence[str] = ()) -> None:
    """Convert every option of a frozen settings object to its declared type
    and check its choices and minimum; a bad value is a ValueError naming it."""
    for d in fields_of(type(settings)):
        if d.name in skip:
            continue
        value = getattr(settings, d.name)
        if _scalar(d.kind):
            value = convert(value, d.kind, d.name)
            object.__setattr__(settings, d.name, value)
        choices = d.option.choices
        if choices is not None and value is not None and value not in choices:
            if all(isinstance(c, str) for c in choices):
                raise ValueError(f"unknown {d.name} {value!r}; choose from {', '.join(choices)}")
            listed = " or ".join([", ".join(map(str, choices[:-1])), str(choices[-1])] if len(choices) > 1 else [str(choices[0])])
            raise ValueError(f"{d.name} must be {listed}, got {value}")
        if d.option.minimum is not None and value is not None and value < d.option.minimum:
            raise ValueError(f"{d.name} must be at least {d.option.minimum}, got {value}")


def _scalar(kind: Any) -> bool:
    """bool, int, float or str, or a union of them with None: what `convert` converts."""
    plain = (bool, int, float, str, type(None))
    if typing.get_origin(kind) is typing.Literal:
        return False
    return kind in plain or bool(typing.get_args(kind)) and all(a in plain for a in typing.get_args(kind))


def add_flags(parser: argparse.ArgumentParser, cls: type, exclusive: Sequence[str] = ()) -> None:
    """One flag per option a user sets on the command line. Each defaults to
    None (not given) so that the class's own default applies; `exclusive`
    options are mutually exclusive flags."""
    group = parser.add_mutually_exclusive_group() if exclusive else None
    for d in fields_of(cls):
        kwargs: dict[str, Any] = {"help": _help(d), "default": None, **d.option.cli}
        if d.base is bool and "action" not in kwargs:
            kwargs["action"] = "store_false" if d.default is True else "store_true"
        elif "type" not in kwargs and "action" not in kwargs:
            kwargs["type"] = d.base if d.base in (int, float, str) else str
            if d.option.choices is not None:
                kwargs["choices"] = tuple(d.option.choices)
        (group if d.name in exclusive else parser).add_argument(d.flag, dest=d.name, **kwargs)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The options the flags set (flags not given are left out: the class's defaults apply)."""
    return {d.name: value for d in fields_of(cls) if (value := getattr(args, d.name, None)) is not None}


def _help(d: Declared) -> str:
    default = d.default
    if default is True:
        return f"{d.option.help} (on unless this flag is given)"
    if default is None or isinstance(default, bool) or d.option.cli.get("action") == "append":
        return d.option.help
    return f"{d.option.help} (default {default})"
