"""Named implementations that outside packages extend through entry points.

Each extension point (domains, agent strategies, user simulators, workload kinds, simulator
behaviours) is one :class:`Registry`. Built-ins are named by import path and loaded on first
use, so a broken implementation cannot break the others; a package adds its own with an entry
point in the registry's group, e.g. in its ``pyproject.toml``::

    [project.entry-points."agentload.domains"]
    helpdesk = "agentload_helpdesk:DOMAIN"

and it then shows up wherever the registry's names are listed (``tasks list``, ``--help``).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

log = logging.getLogger("agentload.registry")

T = TypeVar("T")

ENTRY_POINT_PREFIX = "agentload."


class UnknownName(KeyError, ValueError):
    """A name no registry entry has; its message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def load_path(path: str) -> Any:
    """The object at ``"package.module:attribute"`` (or a whole module)."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Name → implementation, from built-ins, entry points and `register` calls.

    `convert` turns what a path or entry point names (a class, a factory, an instance) into
    the registry's item type; it runs once per name. Like a built-in, it may be given as an
    import path ("module:function"), loaded on first use: the registries are declared below
    every implementation (agentload.plugins), so they name their converters, not import them.
    """

    def __init__(
        self,
        group: str,
        what: str,
        builtins: dict[str, str],
        convert: Callable[[str, Any], T] | str | None = None,
    ) -> None:
        self.group = ENTRY_POINT_PREFIX + group
        self.what = what
        self._paths: dict[str, str] = dict(builtins)
        self._objects: dict[str, Any] = {}
        self._loaded: dict[str, T] = {}
        self._convert = convert
        self._scanned = False
        self._lock = threading.RLock()

    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        for ep in entry_points(group=self.group):
            if ep.name in self._paths or ep.name in self._objects:
                log.warning(
                    "%s %r from entry point %s ignored: the name is taken", self.what, ep.name, ep
                )
                continue
            self._paths[ep.name] = ep.value

    def register(self, name: str, obj: Any) -> None:
        """Add (or replace) an implementation at run time: an object or an import path."""
        with self._lock:
            self._scan()
            self._loaded.pop(name, None)
            if isinstance(obj, str):
                self._objects.pop(name, None)
                self._paths[name] = obj
            else:
                self._paths.pop(name, None)
                self._objects[name] = obj

    def unregister(self, name: str) -> None:
        with self._lock:
            for d in (self._paths, self._objects, self._loaded):
                d.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            self._scan()
            return sorted({*self._paths, *self._objects})

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def check(self, name: str) -> str:
        """`name` if registered; else UnknownName listing the known names."""
        if name not in self.names():
            raise UnknownName(f"unknown {self.what} {name!r}; known: {', '.join(self.names())}")
        return name

    def get(self, name: str) -> T:
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
            self.check(name)
            if name in self._objects:
                raw = self._objects[name]
            else:
                path = self._paths[name]
                try:
                    raw = load_path(path)
                except Exception as e:
                    raise ImportError(f"{self.what} {name!r} ({path}) failed to load: {e}") from e
            convert = self._convert
            if isinstance(convert, str):
                self._convert = convert = load_path(convert)
            item = convert(name, raw) if convert is not None else raw
            self._loaded[name] = item
            return item
