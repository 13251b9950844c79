"""Command-line flags declared on the configuration fields they set.

A field carries its flag as ``Annotated`` metadata, next to its default, bounds and
description (the flag's help), so that an option has one declaration: the commands' flags are
generated from the models (`agentload.cli.options`), and `--help` shows the field's default.

    concurrency: Annotated[int | None, flag("--concurrency", "-c", panel=LOAD, metavar="N")] = (
        Field(None, ge=1, description="Closed loop: active sessions.")
    )
"""

from __future__ import annotations

import keyword
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

# Help panels of `--help`.
ENDPOINT = "Endpoint"
WORKLOAD = "Workload"
LOAD = "Load"
SIM = "Simulator"
EXTERNAL = "External agent (--workload external)"
REPLAY = "Replay"
OUTPUT = "Output"

UNSET: Any = object()
"""`Flag.sets` of a flag that takes a value."""

# The two ways --help writes a duration, the same in every command.
SECONDS = "SECONDS"
"""Metavar of a duration given as a number of seconds (2.5)."""
DURATION = "DURATION"
"""Metavar of a duration that also takes a unit: 90, 30s, 5m, 500ms (`units.parse_duration`)."""

_DURATION_NAME = re.compile(r"(^|-)(s|timeout|interval|duration|delay|time|wait|period)$")
_SECONDS_HELP = re.compile(r"\bseconds\b", re.IGNORECASE)


def looks_like_duration(name: str, help: str = "") -> bool:
    """Whether a flag (``--drain-timeout``, ``--fault-stall-s``) or its help ("Seconds
    between …") says that it takes a duration, so --help must write SECONDS or DURATION."""
    bare = name.split("/")[0].lstrip("-")
    return bool(_DURATION_NAME.search(bare) or _SECONDS_HELP.search(help))


@dataclass(frozen=True)
class Flag:
    """How a config field is set from the command line."""

    decls: tuple[str, ...]
    panel: str
    metavar: str | None = None
    help: str | Callable[[], str] | None = None
    """Help text (or a function that writes it); default: the field's description."""
    type: Any = None
    """Type of the flag's value when it is not the field's (e.g. str for "10m" or a list)."""
    sets: Any = UNSET
    """A flag without a value (``--no-metrics``) that sets the field to this."""
    resume: bool = False
    """Also taken by ``--resume``: it changes how this attempt runs, not what it measures."""

    @property
    def name(self) -> str:
        """The parameter name: the first long flag, without dashes and ``/--no-…``."""
        long = next(d for d in self.decls if d.startswith("--"))
        name = long.split("/")[0][2:].replace("-", "_")
        return name + "_" if keyword.iskeyword(name) else name  # --from

    def renamed(self, prefix: str) -> Flag:
        """The flag under a prefix: ``--speedup`` becomes ``--sim-speedup``; short flags go."""
        decls = tuple(
            "/".join("--" + prefix + part.removeprefix("--") for part in d.split("/"))
            for d in self.decls
            if d.startswith("--")
        )
        return Flag(decls, self.panel, self.metavar, self.help, self.type, self.sets, self.resume)


def flag(
    *decls: str,
    panel: str,
    metavar: str | None = None,
    help: str | Callable[[], str] | None = None,
    type: Any = None,
    sets: Any = UNSET,
    resume: bool = False,
) -> Flag:
    """A field's flag (``Annotated[T, flag("--name", panel=...)]``). A duration flag without
    a metavar gets SECONDS, or DURATION when its value is text that the field parses."""
    if (
        metavar is None
        and sets is UNSET
        and looks_like_duration(decls[0], help if isinstance(help, str) else "")
    ):
        metavar = DURATION if type is not None else SECONDS
    return Flag(tuple(decls), panel, metavar, help, type, sets, resume)


def seconds(*decls: str, panel: str, help: str | None = None, resume: bool = False) -> Flag:
    """The flag of a float field in seconds: --help writes its value SECONDS."""
    return flag(*decls, panel=panel, metavar=SECONDS, help=help, resume=resume)


def duration(
    *decls: str, panel: str, help: str | None = None, resume: bool = False, metavar: str = DURATION
) -> Flag:
    """The flag of a duration field whose validator reads `units.parse_duration` text (30s,
    5m): the flag passes the text through, and --help writes its value DURATION."""
    return flag(*decls, panel=panel, metavar=metavar, type=str | None, help=help, resume=resume)


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated value ("a, b,,c" -> ["a", "b", "c"]), blanks dropped."""
    return [p.strip() for p in text.split(",") if p.strip()]


def split_items(
    items: Iterable[Any], sep: str, error: Callable[[Any], str]
) -> Iterator[tuple[str, str]]:
    """(key, raw value) of each repeated flag item such as 'Name: value' or KEY=VALUE;
    ValueError(error(item)) for an item without `sep` or without a key."""
    for item in items:
        key, found, raw = str(item).partition(sep)
        if not found or not key.strip():
            raise ValueError(error(item))
        yield key.strip(), raw


def help_of(info: FieldInfo, f: Flag) -> str:
    """A flag's help: its own text, else the field's description."""
    text = f.help() if callable(f.help) else f.help
    return text or info.description or ""


def flags_of(info: FieldInfo) -> list[Flag]:
    """The flags a field declares."""
    return [m for m in info.metadata if isinstance(m, Flag)]


def flagged_fields(
    model: type[BaseModel], prefix: str = ""
) -> Iterator[tuple[str, FieldInfo, Flag]]:
    """(dotted path, field, flag) of every flag declared in `model` and the models it nests."""
    for name, info in model.model_fields.items():
        path = prefix + name
        for f in flags_of(info):
            yield path, info, f
        nested = _model_of(info.annotation)
        if nested is not None:
            yield from flagged_fields(nested, path + ".")


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``M`` or ``M | None``), else None."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for t in (annotation, *(typing.get_args(annotation) if union else ())):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def field_at(model: type[BaseModel], path: str) -> FieldInfo:
    """The field at a dotted path of `model` (KeyError if there is none)."""
    current: type[BaseModel] | None = model
    info: FieldInfo | None = None
    for part in path.split("."):
        if current is None:
            raise KeyError(path)
        info = current.model_fields[part]
        current = _model_of(info.annotation)
    assert info is not None
    return info
