"""The command line at both ends of the typer range pyproject.toml declares.

Each case installs typer (and what pip pairs with it: Click, rich) from PyPI into a small
temporary venv that sees this environment's packages behind its own, then runs
`agentload --help` and `agentload run --help` there. The lowest case pins the range's lower
bound; the newest lets pip pick the newest release inside the range."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _typer_spec() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"typer\b", d)]
    return str(spec)


def _lowest(spec: str) -> str:
    m = re.search(r">=\s*([0-9][0-9.]*)", spec)
    assert m, f"pyproject.toml's typer requirement has no lower bound: {spec}"
    return f"typer=={m.group(1)}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("end", ["lowest", "newest"])
def test_cli_runs_with_typer(end: str, tmp_path: Path) -> None:
    spec = _typer_spec()
    req = _lowest(spec) if end == "lowest" else spec
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-input", req],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    # Written after the install, so pip resolves typer's own dependencies for the new venv
    # alone; this environment's packages (agentload itself among them) come after its own.
    site_dir = sysconfig.get_paths()["purelib"]
    purelib = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "zz_outer.pth").write_text(f"import site; site.addsitedir({site_dir!r})\n")
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    version = subprocess.run(
        [str(py), "-c", "import typer; print(typer.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    if end == "lowest":
        assert version.startswith(req.removeprefix("typer==")), version
    for args in (["--help"], ["run", "--help"]):
        res = subprocess.run(
            [str(py), "-m", "agentload", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        where = f"typer {version}, agentload {' '.join(args)}"
        assert res.returncode == 0, f"{where}: {res.stderr[-2000:]}"
        assert "Usage:" in res.stdout and "--help" in res.stdout, where
        if args[0] == "run":
            assert "--concurrency" in res.stdout and "--request-seed" in res.stdout, where
