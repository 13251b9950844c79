"""No function in the package is longer than a screen and a half (80 lines): a longer one is
split into named steps. Its complexity limit is ruff's C901 (pyproject.toml). aiohttp client
sessions are opened in one module (`agentload.http_sessions`), and no module imports another
module's private (`_name`) names."""

from __future__ import annotations

import ast
from pathlib import Path

import agentload

PKG = Path(agentload.__file__).parent
MAX_LINES = 80


def _long_functions(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return out


def test_no_function_is_over_80_lines() -> None:
    assert _long_functions(PKG) == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text("async def long():\n" + body)
    assert _long_functions(tmp_path) == [f"m.py:1 long ({MAX_LINES + 1})"]


# -- one place opens aiohttp client sessions -----------------------------------------------
SESSIONS_MODULE = "http_sessions.py"


def _session_opens(root: Path) -> list[str]:
    """Calls of aiohttp's ClientSession (as `aiohttp.ClientSession(` or a name imported from
    aiohttp) in modules under `root`; other libraries' ClientSession (MCP's) do not count."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        local = {
            a.asname or a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "aiohttp"
            for a in n.names
            if a.name == "ClientSession"
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            hit = (
                isinstance(f, ast.Attribute)
                and f.attr == "ClientSession"
                and isinstance(f.value, ast.Name)
                and f.value.id == "aiohttp"
            ) or (isinstance(f, ast.Name) and f.id in local)
            if hit:
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_aiohttp_sessions_open_in_one_place() -> None:
    opens = _session_opens(PKG)
    assert opens and all(o.startswith(SESSIONS_MODULE + ":") for o in opens), opens


def test_the_session_check_sees_a_stray_session(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import aiohttp\ns = aiohttp.ClientSession()\n")
    (tmp_path / "b.py").write_text("from aiohttp import ClientSession as S\ns = S()\n")
    (tmp_path / "c.py").write_text("from mcp import ClientSession\ns = ClientSession(1, 2)\n")
    assert _session_opens(tmp_path) == ["a.py:2", "b.py:2"]


# -- no private names imported across modules ----------------------------------------------
def _private_imports(root: Path) -> list[str]:
    """`from agentload.x import _name` (or a relative import of one) in modules under
    `root`; dunders such as `__version__` are public."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if not (node.level or (node.module or "").split(".")[0] == "agentload"):
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__"):
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.module}: {name}")
    return out


def test_no_private_names_imported_across_modules() -> None:
    assert _private_imports(PKG) == []


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from agentload.a import _x, __version__, y\nfrom . import _z\nfrom os import _exit\n"
    )
    assert _private_imports(tmp_path) == ["m.py:1 agentload.a: _x", "m.py:2 None: _z"]
