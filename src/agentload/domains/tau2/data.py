"""Where the τ²-bench data lives and what it holds: the folder, its files' hashes, tasks and
splits.

The data is read at run time from a τ²-bench data folder and never shipped with agentload.
The folder is found, in this order, from `configure(data_dir=...)` (the `--tau2-data` flag or
`workload.tau2.data` in the config), then the `AGENTLOAD_TAU2_DATA` environment variable. It
may be τ²-bench's `data/tau2/domains` folder itself, or any folder above it in a τ²-bench
checkout (`DIR/data/tau2/domains`, `DIR/tau2/domains`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA_ENV = "AGENTLOAD_TAU2_DATA"
SPLIT_ENV = "AGENTLOAD_TAU2_SPLIT"
DEFAULT_SPLIT = "base"

# The domains of the family: name in agentload -> τ²'s folder name and the files it reads.
DOMAIN_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "airline": ("airline", ("db.json", "policy.md")),
    "retail": ("retail", ("db.json", "policy.md")),
    "telecom": (
        "telecom",
        ("db.toml", "user_db.toml", "main_policy.md", "tech_support_manual.md"),
    ),
    "telecom-workflow": (
        "telecom",
        ("db.toml", "user_db.toml", "main_policy.md", "tech_support_workflow.md"),
    ),
    "mock": ("mock", ("db.json", "user_db.json", "policy.md")),
}
GUIDELINES = ("simulation_guidelines.md", "simulation_guidelines_tools.md")


class Tau2DataError(LookupError):
    """The τ²-bench data folder is missing or is not one (one line says what was expected)."""


_explicit: Path | None = None


def configure(data_dir: str | os.PathLike[str] | None = None, split: str | None = None) -> None:
    """Point the τ² domains at a data folder and a task split for this process and the
    processes it starts (worker processes and the embedded simulator read the same
    environment variables)."""
    global _explicit
    if data_dir is not None:
        _explicit = Path(data_dir).expanduser()
        os.environ[DATA_ENV] = str(_explicit)
    if split is not None:
        os.environ[SPLIT_ENV] = split
    _folder.cache_clear()
    _domain_dir.cache_clear()


def current_split() -> str:
    return os.environ.get(SPLIT_ENV) or DEFAULT_SPLIT


def data_dir() -> Path:
    """The resolved `domains` folder; raises Tau2DataError with what was expected."""
    given = _explicit or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None)
    return _folder(given)


@cache
def _folder(given: Path | None) -> Path:
    if given is None:
        raise Tau2DataError(
            "no τ²-bench data folder: give --tau2-data DIR (τ²-bench's data/tau2/domains "
            f"folder, or a checkout of τ²-bench) or set {DATA_ENV}"
        )
    for candidate in (given, given / "data" / "tau2" / "domains", given / "tau2" / "domains"):
        if (candidate / "airline" / "tasks.json").is_file() or (
            candidate / "mock" / "tasks.json"
        ).is_file():
            return candidate.resolve()
    if not given.exists():
        raise Tau2DataError(f"τ²-bench data folder {given} does not exist")
    raise Tau2DataError(
        f"{given} is not a τ²-bench data folder: expected its data/tau2/domains folder, "
        "with airline/, retail/, telecom/ or mock/ each holding tasks.json"
    )


def domain_dir(key: str) -> Path:
    """The folder of one domain (`key` as in DOMAIN_FILES), checked for its files."""
    return _domain_dir(key, data_dir())


@cache
def _domain_dir(key: str, root: Path) -> Path:
    folder, files = DOMAIN_FILES[key]
    path = root / folder
    missing = [f for f in ("tasks.json", *files) if not (path / f).is_file()]
    if missing:
        raise Tau2DataError(f"τ²-bench data folder {root}: {folder}/ lacks {', '.join(missing)}")
    return path


def guidelines_path(name: str) -> Path:
    """A user-simulator guideline file: `user_simulator/` inside the data folder (as shipped
    for tests) or beside it (τ²-bench's own layout, data/tau2/user_simulator)."""
    root = data_dir()
    for p in (root / "user_simulator" / name, root.parent / "user_simulator" / name):
        if p.is_file():
            return p
    raise Tau2DataError(
        f"τ²-bench data folder {root}: no user_simulator/{name} (inside it or beside it)"
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class DataFiles:
    """The files one domain reads and their sha256, and one version string over all."""

    hashes: dict[str, str]  # path relative to the data folder -> sha256

    @property
    def version(self) -> str:
        blob = json.dumps(self.hashes, sort_keys=True).encode()
        return "tau2-data:" + hashlib.sha256(blob).hexdigest()[:16]


@cache
def _files(key: str, root: Path) -> DataFiles:
    folder, files = DOMAIN_FILES[key]
    base = domain_dir(key)
    names = ["tasks.json", *files]
    if (base / "split_tasks.json").is_file():
        names.append("split_tasks.json")
    hashes = {f"{folder}/{n}": _sha256(base / n) for n in names}
    for g in GUIDELINES:
        try:
            p = guidelines_path(g)
        except Tau2DataError:
            continue
        hashes[f"user_simulator/{g}"] = _sha256(p)
    return DataFiles(hashes)


def data_files(key: str) -> DataFiles:
    return _files(key, data_dir())


@cache
def _load_tasks(path: Path, size: int, mtime: int) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        data = json.loads(f.read())
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    if not isinstance(data, list):
        raise Tau2DataError(f"{path}: expected a JSON list of tasks")
    for i, t in enumerate(data):
        if not isinstance(t, dict) or not isinstance(t.get("id"), str | int):
            raise Tau2DataError(f"{path}: task #{i} has no id")
    return data


def raw_tasks(key: str) -> list[dict[str, Any]]:
    """τ²'s task records of one domain, as in its tasks.json (all of them, every split)."""
    p = domain_dir(key) / "tasks.json"
    st = p.stat()
    return _load_tasks(p, st.st_size, st.st_mtime_ns)


def splits(key: str) -> dict[str, list[str]]:
    """τ²'s split file of the domain (split name -> task ids); {} when it has none."""
    p = domain_dir(key) / "split_tasks.json"
    if not p.is_file():
        return {}
    with open(p, "rb") as f:
        data = json.loads(f.read())
    if not isinstance(data, dict):
        raise Tau2DataError(f"{p}: expected an object of split name -> task ids")
    return {str(k): [str(i) for i in v] for k, v in data.items()}
