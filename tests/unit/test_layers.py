"""The package's layers: lower layers never import higher ones."""

from __future__ import annotations

import ast
from pathlib import Path

import agentload
import agentload.agents.actions as agent_actions
import agentload.domains.text_actions as text_actions

PKG = Path(agentload.__file__).parent

# A module in the key folder may not import any of these packages.
FORBIDDEN = {
    "domains": ("agentload.agents", "agentload.workloads", "agentload.runner", "agentload.cli"),
    "client": ("agentload.agents", "agentload.workloads", "agentload.runner", "agentload.cli"),
    "sim": ("agentload.agents", "agentload.workloads", "agentload.runner"),
    # The run's core runs one way: runner -> execute, distributed -> session -> the rest.
    "session": (
        "agentload.runner",
        "agentload.execute",
        "agentload.distributed",
        "agentload.integrations",
        "agentload.sweep",
        "agentload.cli",
    ),
    "execute": (
        "agentload.runner",
        "agentload.distributed",
        "agentload.integrations",
        "agentload.sweep",
        "agentload.cli",
    ),
    "distributed": ("agentload.runner", "agentload.sweep", "agentload.cli"),
    "integrations/ray": ("agentload.runner", "agentload.sweep", "agentload.cli"),
}

# The run's core: no import circle among these (any import, in a function or not).
CORE = ("runner", "execute", "session", "distributed", "integrations.ray", "outcome")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports (top level or inside functions), with its line."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_lower_layers_do_not_import_higher_ones() -> None:
    bad = []
    for folder, forbidden in FORBIDDEN.items():
        for path in sorted((PKG / folder).rglob("*.py")):
            for line, module in _imports(path):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    bad.append(f"{path.relative_to(PKG)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


def _unit(module: str) -> str | None:
    """The CORE unit a module belongs to (None: outside the core)."""
    rest = module.removeprefix("agentload.")
    return next((u for u in CORE if rest == u or rest.startswith(u + ".")), None)


def test_the_run_core_has_no_import_circle() -> None:
    edges: dict[str, set[str]] = {u: set() for u in CORE}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        here = _unit("agentload." + ".".join(p for p in rel.parts if p != "__init__"))
        if here is None:
            continue
        for _, module in _imports(path):
            there = _unit(module)
            if there is not None and there != here:
                edges[here].add(there)

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n})) for n in edges[a])

    circles = sorted(f"{a} <-> {b}" for a in CORE for b in edges[a] if reaches(b, a, {b}))
    assert not circles, circles
    # The arrows that make the core's shape, so a change to it is seen.
    assert {"execute", "distributed", "integrations.ray"} <= edges["runner"]
    assert "session" in edges["execute"] and "session" in edges["distributed"]


def test_the_checker_sees_function_level_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from agentload.agents.actions import parse_action\n")
    assert _imports(src) == [(2, "agentload.agents.actions")]


def test_agent_action_names_are_the_shared_parser() -> None:
    for name in ("RESPOND", "ActionParseError", "ParsedAction", "format_action", "parse_action"):
        assert getattr(agent_actions, name) is getattr(text_actions, name)
    parsed = agent_actions.parse_action('Action: {"name": "respond", "arguments": {"text": "hi"}}')
    assert parsed.is_respond and parsed.respond_text() == "hi"
