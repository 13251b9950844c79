"""The package's layers: lower layers never import higher ones."""

from __future__ import annotations

import ast
import itertools
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


# ---- the whole package ---------------------------------------------------------------------
#
# A "room" is what sits directly under agentload/: a module (config.py) or a package (sim/).
# Rooms import one way; the only arrow allowed to run back up is listed here with its reason.
BACK_ARROWS = {
    ("sim", "cli"): "`python -m agentload.sim` is the sim command without the rest of the CLI",
}


def _module_of(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    return ".".join(("agentload", *(p for p in rel.parts if p != "__init__"))).rstrip(".")


MODULES = {_module_of(p): p for p in PKG.rglob("*.py")}


def _targets(path: Path, module: str) -> set[str]:
    """The agentload modules a file imports: `from pkg import sub` is the submodule, and a
    relative import is resolved against the file's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            names = subs if len(subs) == len(node.names) else [*subs, base]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


GRAPH = {m: _targets(p, m) for m, p in MODULES.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `edges` (a list of nodes, first = last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_module_imports_itself_round_a_circle() -> None:
    assert _circle(GRAPH) is None, " -> ".join(_circle(GRAPH) or [])


def test_rooms_import_one_way() -> None:
    rooms: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for module, targets in GRAPH.items():
        for t in targets:
            a, b = _room(module), _room(t)
            if a != b and b and (a, b) not in BACK_ARROWS:
                rooms.setdefault(a, set()).add(b)
                where.setdefault((a, b), f"{module} -> {t}")
    circle = _circle(rooms)
    assert circle is None, "rooms in a circle: " + ", ".join(
        where[(a, b)] for a, b in itertools.pairwise(circle)
    )


def test_each_allowed_back_arrow_is_still_there() -> None:
    # A reason left behind after its arrow is gone would let the next one in unseen.
    seen = {(_room(m), _room(t)) for m, ts in GRAPH.items() for t in ts}
    assert set(BACK_ARROWS) <= seen


def test_the_layer_checker_finds_a_circle() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


BLOCK = ("from ", "import ", "#")  # the lines of an import block and its comment


def _lazy_imports_without_reason(path: Path, root: Path = PKG) -> list[str]:
    """Function-level imports of agentload modules with no `# lazy:` comment on the line or
    just above it (over the rest of the same import block)."""
    lines = path.read_text().split("\n")
    bad = []
    for fn in ast.walk(ast.parse("\n".join(lines), filename=str(path))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
            elif isinstance(node, ast.Import):
                module = node.names[0].name
            else:
                continue
            if not module.startswith(("agentload", ".")):
                continue
            k = node.lineno - 1
            said = "# lazy:" in lines[k]
            while not said and k > 0 and lines[k - 1].strip().startswith(BLOCK):
                k -= 1
                said = "# lazy:" in lines[k]
            if not said:
                bad.append(f"{path.relative_to(root)}:{node.lineno} imports {module}")
    return bad


def test_an_import_inside_a_function_says_why() -> None:
    # Only start-up time or an optional dependency keeps an import lazy, and it says which;
    # an import circle is not a reason (there is none left to dodge).
    bad = [b for p in sorted(PKG.rglob("*.py")) for b in _lazy_imports_without_reason(p)]
    assert not bad, "\n".join(bad)
    reasons = [
        line.split("# lazy:", 1)[1].strip()
        for p in PKG.rglob("*.py")
        for line in p.read_text().split("\n")
        if "# lazy:" in line
    ]
    assert reasons and all(r.startswith(("start-up", "optional")) for r in reasons), reasons


def test_the_lazy_checker_needs_a_reason(tmp_path: Path) -> None:
    bare = tmp_path / "m.py"
    bare.write_text("def f():\n    from agentload.util import run_async\n")
    assert _lazy_imports_without_reason(bare, tmp_path) == ["m.py:2 imports agentload.util"]
    bare.write_text("def f():\n    # lazy: start-up\n    from agentload.util import run_async\n")
    assert _lazy_imports_without_reason(bare, tmp_path) == []
