"""MLflow logging against MLflow 3 (this environment's) and MLflow 2 (a small venv built from
PyPI, cached in pytest's cache folder), each with a `file:` store, a `sqlite:` store and a
loopback `mlflow server`: a run with its report's charts, a sweep as a parent run with one
nested run per load point under the run's metric names, and the command line's exit codes.

The MLflow 2 venv sees this environment's packages behind its own, so pip adds only what
MLflow 2 needs on top (about 20 s and 340 MB once); it is rebuilt when the requirement or the
interpreter changes, and its test is skipped when the package index cannot be reached."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentload.integrations import mlflow as ml

HERE = Path(__file__).resolve().parent
CHECK = HERE / "mlflow_check.py"


def _mlflow2() -> tuple[str, ...]:
    """The newest MLflow 2 inside pyproject.toml's `mlflow` extra. MLflow 2 imports a
    SQLAlchemy pool class that SQLAlchemy 2.1 removed (sqlite and server stores fail at
    import), so its venv keeps SQLAlchemy 2.0."""
    extra = tomllib.loads((HERE.parents[1] / "pyproject.toml").read_text())["project"]
    (spec,) = extra["optional-dependencies"]["mlflow"]
    m = re.fullmatch(r"mlflow>=(2\.[0-9.]+),<4", spec)
    assert m, f"pyproject.toml's mlflow extra is {spec!r}; this test covers MLflow 2 and 3"
    return (f"mlflow>={m.group(1)},<3", "sqlalchemy<2.1")


MLFLOW2 = _mlflow2()
_OFFLINE = re.compile(
    r"NewConnectionError|Failed to establish|Name or service not known|Temporary failure in name"
    r"|Network is unreachable|ProxyError|No matching distribution found",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    db: Path

    def ready(self) -> str:
        """The server's URL once /health answers (it boots while the sweep runs)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return self.url
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("mlflow server did not start: " + self.log.read_text()[-2000:])
            time.sleep(0.3)


def _serve(mlflow_exe: Path, where: Path) -> Iterator[Server]:
    where.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cmd = [str(mlflow_exe), "server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1", "--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}"]
    cmd += ["--artifacts-destination", str(where / "artifacts")]
    log = where / "server.log"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True
    )
    try:
        yield Server(proc, f"http://127.0.0.1:{port}", log, where / "mlflow.db")
    finally:
        # Its state is thrown away: a short grace, then gone (gunicorn drains for seconds).
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _site(py: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run([str(py), "-c", code], capture_output=True, text=True).stdout.strip()
    )


def _mlflow2_venv(where: Path) -> Path | str:
    """The venv's python, or why it could not be built (network)."""
    py = where / "bin" / "python"
    outer = sysconfig.get_paths()["purelib"]
    stamp = json.dumps({"req": MLFLOW2, "python": sys.version, "outer": outer})
    if (where / "stamp.json").is_file() and (where / "stamp.json").read_text() == stamp:
        return py
    shutil.rmtree(where, ignore_errors=True)
    venv.create(where, with_pip=False)
    # Before the install, so pip keeps what this environment already satisfies and adds only
    # MLflow 2 and the versions it needs in front of it.
    (_site(py) / "zz_outer.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-input", *MLFLOW2],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if install.returncode != 0:
        shutil.rmtree(where, ignore_errors=True)
        if _OFFLINE.search(install.stderr):
            last = install.stderr.strip().splitlines()[-1]
            return f"{' '.join(MLFLOW2)} not installable here (no package index?): {last}"
        pytest.fail(f"pip install {' '.join(MLFLOW2)} failed: {install.stderr[-2000:]}")
    (where / "stamp.json").write_text(stamp)
    return py


@pytest.fixture(scope="module")
def mlflow3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(Path(sys.executable).parent / "mlflow", tmp_path_factory.mktemp("srv3"))


@pytest.fixture(scope="module")
def mlflow2(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Server] | str]:
    cache = getattr(request.config, "cache", None)
    where = cache.mkdir("mlflow2-venv") if cache else tmp_path_factory.mktemp("mlflow2-venv")
    py = _mlflow2_venv(Path(where) / "venv")
    if isinstance(py, str):
        yield py
        return
    yield from ((py, s) for s in _serve(py.parent / "mlflow", tmp_path_factory.mktemp("srv2")))


@dataclass
class Sweep:
    root: Path
    proc: subprocess.CompletedProcess[str]
    store: str


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, mlflow3: Server, mlflow2: Any) -> Sweep:
    """A two-point sweep on the simulator, logged by the command line to a `file:` store
    under MLflow 3 (the servers boot meanwhile)."""
    tmp = tmp_path_factory.mktemp("sweep")
    store = f"file://{tmp / 'cli-mlruns'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_TRACKING_URI"] = store
    args = ["sweep", "--concurrency", "1,2", "--tasks", "airline/000-001", "--sim-speedup", "50"]
    args += ["--no-metrics", "--mlflow", "--out", str(tmp / "sw")]
    proc = subprocess.run(
        [sys.executable, "-m", "agentload", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Sweep(tmp / "sw", proc, store)


def _check(py: Path, sweep: Sweep, uris: list[str], cwd: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    res = subprocess.run(
        [str(py), str(CHECK), str(sweep.root / "c0001"), str(sweep.root), *uris],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,  # a sqlite store keeps its artifacts under ./mlruns
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    # Only the check's own line: MLflow's "View run" links go to stderr (stdout may be --json).
    (line,) = res.stdout.splitlines()
    assert line.startswith("MLFLOW_CHECK "), res.stdout[-2000:]
    return dict(json.loads(line.removeprefix("MLFLOW_CHECK ")))


def _stores(tmp: Path, server: Server) -> list[str]:
    # The sqlite store is the server's own database, which the server has migrated by the
    # time it answers (a fresh one takes MLflow 3 some 15 s); the check logs to its own
    # experiment there.
    return [f"file://{tmp / 'mlruns'}", server.ready(), f"sqlite:///{server.db}"]


def _images(report_md: Path) -> set[str]:
    found = set(re.findall(r"!\[[^]]*\]\(([^)]+)\)", report_md.read_text()))
    assert found and all(i.startswith("charts/") for i in found), found
    return found


def _assert_logged(found: dict[str, Any], sweep: Sweep) -> None:
    """What MLflow holds for the run (c0001) and the sweep, on every store."""
    run_summary = json.loads((sweep.root / "c0001" / "summary.json").read_text())
    agent = run_summary["calls"]["by_role"]["agent"]
    images = {row: _images(sweep.root / row / "report.md") for row in ("c0001", "c0002")}
    doc = json.loads((sweep.root / "sweep.json").read_text())
    for uri, got in found["stores"].items():
        run, parent = got["run"], got["sweep"]
        where = f"MLflow {found['version']}, {uri}"
        assert run["tags"]["agentload.kind"] == "run", where
        assert run["params"]["load.concurrency"] == "1", where
        assert run["metrics"]["ttft_p90_s"] == pytest.approx(agent["ttft_s"]["p90"]), where
        assert run["metrics"]["success_rate"] == pytest.approx(
            run_summary["episodes"]["success_rate"]
        ), where
        assert {"report.md", "report.html", "summary.json", "calls.jsonl"} <= set(
            run["artifacts"]
        ), where
        # Every image report.md shows is an artifact beside it.
        assert images["c0001"] <= set(run["charts"]), where

        assert parent["tags"]["agentload.kind"] == "sweep", where
        assert parent["params"]["sweep.kind"] == "concurrency", where
        assert parent["params"]["sweep.points"] == "1,2", where
        assert parent["metrics"]["points"] == 2, where
        assert {"sweep.html", "sweep.md", "sweep.json"} <= set(parent["artifacts"]), where
        kids = parent["children"]
        assert [k["name"] for k in kids] == ["concurrency 1", "concurrency 2"], where
        for kid, row in zip(kids, doc["points"], strict=True):
            assert kid["tags"]["agentload.kind"] == "sweep point", where
            assert kid["params"]["sweep.point"] == f"{row['concurrency']:g}", where
            assert kid["params"]["load.concurrency"] == f"{row['concurrency']:g}", where
            # One naming: a point's metrics are a run's, with the sweep table's values.
            assert set(kid["metrics"]) == set(run["metrics"]), where
            assert kid["metrics"]["ttft_p90_s"] == pytest.approx(row["ttft_p90"]), where
            assert kid["metrics"]["itl_p99_s"] == pytest.approx(row["itl_p99"]), where
            # The row's figures under the same names, as logged when a point lost its summary.
            for name, value in ml.row_metrics(row).items():
                assert kid["metrics"][name] == pytest.approx(value), (where, name)
            assert {"report.md", "summary.json"} <= set(kid["artifacts"]), where
            assert images[row["dir"]] <= set(kid["charts"]), where


@pytest.mark.timeout(300)
def test_mlflow3_file_sqlite_and_server(sweep: Sweep, mlflow3: Server, tmp_path: Path) -> None:
    found = _check(Path(sys.executable), sweep, _stores(tmp_path, mlflow3), tmp_path)
    assert found["version"].startswith("3."), found["version"]
    assert len(found["stores"]) == 3
    _assert_logged(found, sweep)


@pytest.mark.timeout(300)
def test_mlflow2_file_sqlite_and_server(sweep: Sweep, mlflow2: Any, tmp_path: Path) -> None:
    if isinstance(mlflow2, str):
        pytest.skip(mlflow2)
    py, server = mlflow2
    found = _check(py, sweep, _stores(tmp_path, server), tmp_path)
    assert found["version"].startswith("2."), found["version"]
    assert len(found["stores"]) == 3
    _assert_logged(found, sweep)


@pytest.mark.timeout(300)
def test_sweep_command_logs_a_parent_and_a_run_per_point(
    sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store then
    assert sweep.proc.returncode == 0, sweep.proc.stderr[-2000:]
    (said,) = [ln for ln in sweep.proc.stderr.splitlines() if "logged to MLflow" in ln]
    parent_id = said.rsplit(" ", 1)[-1]
    client = MlflowClient(tracking_uri=sweep.store)
    parent = client.get_run(parent_id)
    kids = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert sorted(k.data.params["load.concurrency"] for k in kids) == ["1", "2"]


def test_failed_logging_is_one_whole_line_and_exit_1(tmp_path: Path) -> None:
    """MLflow 3 refuses a file store when MLFLOW_ALLOW_FILE_STORE is false: the whole reason,
    its URL included, on one line; the results are complete and the exit code is 1."""
    refuses = pytest.importorskip("mlflow.environment_variables")
    if not hasattr(refuses, "MLFLOW_ALLOW_FILE_STORE"):
        pytest.skip("this MLflow takes a file store without an opt-in")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_TRACKING_URI"] = f"file://{tmp_path / 'mlruns'}"
    env["MLFLOW_ALLOW_FILE_STORE"] = "false"
    args = ["run", "--tasks", "airline/000-001", "--sim-speedup", "50", "--no-metrics"]
    args += ["--no-report", "--quiet", "--out", str(tmp_path / "r")]
    res = subprocess.run(
        [sys.executable, "-m", "agentload", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr[-2000:]
    (line,) = res.stderr.splitlines()
    assert line.startswith("agentload: error: MLflow logging failed (the results are written): ")
    assert "MlflowException" in line
    # The sentence MLflow ends on, and its link whole (it used to be cut at 300 characters).
    assert line.endswith("to opt out of this exception."), line
    assert "https://mlflow.org/docs/" in line and len(line) > 400, line
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["episodes"]["episodes"] == 2
