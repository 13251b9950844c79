"""No function in the package is longer than a screen and a half (80 lines): a longer one is
split into named steps. Its complexity limit is ruff's C901 (pyproject.toml)."""

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
