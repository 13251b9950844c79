"""The run under abuse: kill -9 and resume, endpoint outages, malformed replies, bad input.

Re-measures each row of the reliability table in docs/reliability.md and prints it:

1. **kill -9**: a run on the embedded simulator is killed at a chosen moment (a hook installed
   in the child process sends SIGKILL to itself at a named code point, or a timer kills it
   from outside), then `agentload run --resume DIR` finishes it. Holds when the resume exits
   0 and sessions.jsonl holds every planned (task, trial) exactly once, each with all of its
   calls in calls.jsonl, run.json `completed` and no temporary file left.
2. **outages**: `agentload sim` is killed mid-run and restarted on the same port after 5 s and
   60 s. Holds when the run exits 0 with every planned session once and none `infra_error`.
3. **malformed replies**: a scripted loopback server answers every call with one bad shape
   (the shapes of tests/integration/test_client_malformed.py, and more); `agentload run`
   against it holds when calls.jsonl has one record per request the server received, none
   of them the client's `client_error` safety net, and nothing printed a traceback (calls
   recorded as ok are listed as observations).
4. **bad input**: bad config files, command lines, damaged results folders (through `report`,
   `run --resume` and `export`) and bad replay datasets. A case is handled when the command
   exits 2 (1 where docs/run.md says so) with exactly one clear line on stderr and no
   traceback, or gives a correct result.

The case tables of the test suites are reused (tests/ and the dev extras must be there, as in
a checkout with `pip install -e .[dev]`). Traffic goes to 127.0.0.1 only; every command runs
under a timeout and is killed with its process group when it overruns.

    python benchmarks/reliability_probe.py              # every row (about 14 minutes)
    python benchmarks/reliability_probe.py --quick      # a few cases per row (under a minute)
    python benchmarks/reliability_probe.py --only kill,outage --json
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "tests", REPO / "tests" / "integration"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

AGENTLOAD = [sys.executable, "-m", "agentload"]
ROWS = ("kill", "outage", "malformed", "config", "flags", "folders", "datasets")


# ---- running commands ----------------------------------------------------------------------


@dataclass
class Result:
    rc: int | None  # None: timed out (and killed)
    stdout: str
    stderr: str
    wall_s: float

    def tail(self, n: int = 1200) -> str:
        text = (self.stderr or "") + ("\n[stdout] " + self.stdout if self.stdout.strip() else "")
        return text[-n:]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Nothing of the caller's leaks in: no key, no proxy (traffic is loopback only).
    for k in ("OPENAI_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(k, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["COLUMNS"] = "200"
    return env


def invoke(
    args: list[str], cwd: Path, timeout_s: float, *, prefix: list[str] | None = None
) -> Result:
    """Run one command in its own process group; on timeout the whole group is killed."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*(prefix or AGENTLOAD), *args],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    return Result(rc, out, err, time.monotonic() - t0)


def one_line_error(r: Result, needle: str = "", codes: Iterable[int] = (2,)) -> str | None:
    """None when `r` is a handled refusal: an allowed exit code, one stderr line naming the
    problem, no traceback; else why not."""
    if r.rc is None:
        return "timed out"
    if "Traceback" in r.stderr or "Traceback" in r.stdout:
        return "traceback"
    if r.rc not in codes:
        return f"exit {r.rc}, expected {'/'.join(map(str, codes))}"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr"
    if not lines[0].startswith(("agentload", "python -m agentload", "error:")):
        return "the line is not agentload's own message"
    if len(lines[0]) > 1000:
        return "the line is longer than 1,000 characters"
    if needle and needle not in lines[0]:
        return f"the line does not name {needle!r}"
    return None


@dataclass
class Row:
    name: str
    label: str
    total: int = 0
    handled: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    wall_s: float = 0.0
    observations: list[str] = field(default_factory=list)  # held, but worth a look

    def add(self, case: str, why: str | None, detail: str = "") -> None:
        self.total += 1
        if why is None:
            self.handled += 1
        else:
            self.failures.append({"case": case, "why": why, "output": detail})

    @property
    def holds(self) -> bool:
        return self.total > 0 and self.handled == self.total


def pmap(fn: Callable[[Any], Any], items: list[Any], jobs: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(fn, items))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jsonl(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                out.append(rec)
    return out


# ---- 1. kill -9 and resume -----------------------------------------------------------------

# Installed in the child before the CLI runs: SIGKILL to itself at the moment named in
# argv[1] ("what:n" = the n-th time). Nothing after a SIGKILL runs, so this is kill -9.
KILL_HOOK = r"""
import os, signal, sys
what, _, n = sys.argv.pop(1).partition(":")
n = int(n or 1)
seen = {}
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def hit(key):
    seen[key] = seen.get(key, 0) + 1
    return seen[key] == n
import agentload.runner as runner
import agentload.results.recorder as recorder
import agentload.results.lock as lock
if what == "startup":
    die()
if what == "lock":
    real_acquire = lock.ResultsLock.acquire
    def acquire(self, *a, **k):
        r = real_acquire(self, *a, **k)
        die()
    lock.ResultsLock.acquire = acquire
real_replace = os.replace
def replace(src, dst, *a, **k):
    name = os.path.basename(str(dst))
    if what == "before-replace-" + name and hit(name):
        die()  # the temporary file written and synced, not yet renamed
    r = real_replace(src, dst, *a, **k)
    if what == "after-replace-" + name and hit(name):
        die()
    return r
os.replace = replace
real_open = open
def opener(path, mode="r", *a, **k):
    f = real_open(path, mode, *a, **k)
    if what == "created-" + os.path.basename(str(path)):
        die()
    return f
recorder.open = opener
real_append = recorder.Recorder._append
def append(self, name, data):
    if what == "torn-" + name and hit(name):
        f = self._files[name]
        f.write(data[: len(data) // 2]); f.flush()
        die()
    real_append(self, name, data)
    if what == "after-" + name and hit(name):
        die()
recorder.Recorder._append = append
def wrap(mod, attr, when):
    real = getattr(mod, attr)
    def f(*a, **k):
        if when == "before" and hit(attr):
            die()
        r = real(*a, **k)
        if when == "after" and hit(attr):
            die()
        return r
    setattr(mod, attr, f)
for spot in ("start_embedded_sim", "_summarize", "_write_summary", "_report", "_settle"):
    for when in ("before", "after"):
        if what == when + spot:
            wrap(runner, spot, when)
if what == "close":
    wrap(recorder.Recorder, "close", "before")
from agentload.cli import main
sys.argv[0] = "agentload"
main()
"""

# (moment, hook spec or "timer:SECONDS", what it stands for)
KILL_MOMENTS: list[tuple[str, str]] = [
    ("startup", "before anything: the process just started"),
    ("lock", "the folder's lock taken, nothing else written"),
    ("before-replace-config.yaml", "config.yaml written to its temporary file, not renamed"),
    ("after-replace-config.yaml", "between config.yaml and the record files"),
    ("created-calls.jsonl", "while the record files are created (calls.jsonl only)"),
    ("created-trajectories.jsonl", "while the record files are created (three of four)"),
    ("before-replace-run.json:1", "run.json first written, not renamed"),
    ("afterstart_embedded_sim", "the simulator just started, no episode yet"),
    ("after-calls.jsonl:1", "the first call recorded"),
    ("torn-calls.jsonl:9", "half of a call's line written (mid-episode)"),
    ("after-calls.jsonl:25", "mid-episode, several episodes in flight"),
    ("after-trajectories.jsonl:2", "a trajectory written, its session line not"),
    ("torn-sessions.jsonl:3", "half of a session line written"),
    ("after-sessions.jsonl:5", "five sessions committed, others in flight"),
    ("after-server_metrics.jsonl:1", "a server-metrics sample written"),
    ("before_summarize", "every episode done, before the summary"),
    ("before-replace-summary.json:1", "summary.json in its temporary file"),
    ("after_write_summary", "summary.json written, before the report"),
    ("before_report", "while the report is about to be written"),
    ("after_settle", "run.json final, report pending"),
    ("after-replace-run.json:3", "run.json replaced a third time (during the summary)"),
    ("close", "the record files being closed"),
    ("timer:0.8", "kill -9 from outside, 0.8 s after start (imports)"),
    ("timer:2.5", "kill -9 from outside, 2.5 s after start (start-up)"),
    ("timer:4.5", "kill -9 from outside, 4.5 s after start (episodes running)"),
    ("resume:after-sessions.jsonl:2", "the run killed mid-episode, then its resume killed too"),
]


@dataclass
class KillPlan:
    tasks: str
    trials: int
    speedup: float
    profile: str = "tiny-cpu"

    @property
    def planned(self) -> int:
        lo, _, hi = self.tasks.rpartition("/")[2].partition("-")
        return (int(hi) - int(lo) + 1) * self.trials


def _run_args(out: Path, plan: KillPlan) -> list[str]:
    return [
        "run", "--out", str(out), "--tasks", plan.tasks, "--trials", str(plan.trials),
        "--concurrency", "3", "--sim-profile", plan.profile, "--sim-speedup", str(plan.speedup),
        "--metrics-interval", "0.5",
        "--quiet", "--progress", "off",
    ]  # fmt: skip


def _killed_run(args: list[str], cwd: Path, spec: str, timeout_s: float) -> Result:
    if spec.startswith("timer:"):
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [*AGENTLOAD, *args], cwd=cwd, env=_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=float(spec[6:]))
        except subprocess.TimeoutExpired:
            proc.kill()  # SIGKILL to the run process alone, as `kill -9 PID`
            out, err = proc.communicate()
        return Result(proc.returncode, out, err, time.monotonic() - t0)
    return invoke([spec, *args], cwd, timeout_s, prefix=[sys.executable, "-c", KILL_HOOK])


def check_run_folder(out: Path, planned: int) -> str | None:
    """None when the folder holds every planned session once, each with all its calls."""
    sessions = [s for s in jsonl(out / "sessions.jsonl") if not s.get("warmup")]
    keys = Counter((s.get("task_id"), s.get("trial")) for s in sessions)
    dup = [k for k, n in keys.items() if n > 1]
    if dup:
        return f"duplicated sessions: {dup[:3]}"
    if len(keys) != planned:
        return f"{len(keys)} of {planned} planned sessions"
    calls = Counter(c.get("session_id") for c in jsonl(out / "calls.jsonl"))
    for s in sessions:
        counts = s.get("counts") or {}
        want = int(counts.get("agent_calls") or 0) + int(counts.get("user_calls") or 0)
        if calls[s.get("session_id")] < want:
            return f"session {s.get('session_id')}: {calls[s.get('session_id')]} of {want} calls"
    meta = json.loads((out / "run.json").read_text())
    if meta.get("status") != "completed" or meta.get("exit_code") != 0:
        return f"run.json: status {meta.get('status')!r}, exit_code {meta.get('exit_code')!r}"
    left = sorted(p.name for p in out.iterdir() if ".tmp" in p.name)
    if left:
        return f"temporary files left: {left}"
    return None


def kill_case(spec: str, work: Path, plan: KillPlan) -> str | None:
    out = work / "run"
    args = _run_args(out, plan)
    resume = ["run", "--resume", str(out), "--quiet", "--progress", "off"]
    nested = spec.startswith("resume:")
    first = _killed_run(args, work, "after-sessions.jsonl:4" if nested else spec, 180)
    if first.rc != -signal.SIGKILL and not (spec.startswith("timer:") and first.rc == 0):
        # A hook's moment that never came would make the case trivial: say so.
        return f"not killed at that moment (exit {first.rc}): {first.tail()}"
    if nested:
        second = _killed_run(resume, work, spec.partition(":")[2], 180)
        if second.rc != -signal.SIGKILL:
            return f"the killed resume ended {second.rc}: {second.tail()}"
    if not (out / "config.yaml").exists() and not any(
        (out / n).is_file() and (out / n).stat().st_size for n in ("calls.jsonl", "sessions.jsonl")
    ):
        # Killed before anything was recorded: nothing to resume, the same command again
        # (the folder must not be held by the dead process).
        r = invoke(args, work, 240)
    else:
        r = invoke(resume, work, 240)
    if r.rc != 0 or "Traceback" in r.stderr:
        return f"resume exit {r.rc}: {r.tail()}"
    return check_run_folder(out, plan.planned)


def row_kill(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("kill", "kill -9 moments, then `run --resume`: 0 lost, 0 duplicated")
    moments = KILL_MOMENTS
    plan = KillPlan("airline/000-005", 2, 20.0)
    if quick:
        moments = [
            m for m in KILL_MOMENTS if m[0] in ("after-replace-config.yaml", "torn-calls.jsonl:9")
        ]
        plan = KillPlan("airline/000-002", 1, 50.0, "instant")

    def one(item: tuple[int, tuple[str, str]]) -> tuple[str, str | None]:
        i, (spec, _what) = item
        work = tmp / f"kill{i}"
        work.mkdir()
        return spec, kill_case(spec, work, plan)

    for spec, why in pmap(one, list(enumerate(moments)), jobs):
        row.add(spec, why, why or "")
    row.note = f"{plan.planned} planned sessions each ({plan.tasks} × {plan.trials})"
    return row


# ---- 2. outages -----------------------------------------------------------------------------


class Sim:
    def __init__(self, port: int, model: str, cwd: Path) -> None:
        self.port, self.model, self.cwd = port, model, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [*AGENTLOAD, "sim", "--port", str(self.port), "--model", self.model,
             "--profile", "instant"],
            cwd=self.cwd, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{self.port}/v1/models"
                with urllib.request.urlopen(url, timeout=1) as resp:  # loopback only
                    if resp.status == 200:
                        return
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentload sim exited {self.proc.returncode}")
            time.sleep(0.1)
        raise TimeoutError("agentload sim did not answer")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def outage_case(down_s: float, work: Path, episodes: int) -> str | None:
    port, model = free_port(), "probe-model"
    out = work / "run"
    sim = Sim(port, model, work)
    sim.start()
    args = [
        "run", "--out", str(out), "--base-url", f"http://127.0.0.1:{port}/v1", "--model", model,
        "--tasks", "airline", "--trials", "8", "--agent", "oracle", "--user", "llm",
        "--concurrency", "8", "--num-episodes", str(episodes), "--no-metrics", "--no-report",
        "--quiet", "--progress", "off",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [*AGENTLOAD, *args], cwd=work, env=_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            p = out / "sessions.jsonl"
            if p.is_file() and p.read_bytes().count(b"\n") >= episodes // 4:
                break
            time.sleep(0.02)
        else:
            return f"the run did not reach {episodes // 4} sessions (exit {proc.poll()})"
        sim.kill()
        time.sleep(down_s)
        sim.start()
        try:
            _, err = proc.communicate(timeout=down_s + 240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return "the run did not finish after the outage"
    finally:
        sim.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0 or "Traceback" in err:
        return f"exit {proc.returncode}: {err[-800:]}"
    sessions = [s for s in jsonl(out / "sessions.jsonl") if not s.get("warmup")]
    burned = sum(1 for s in sessions if s.get("termination") == "infra_error")
    keys = {(s.get("task_id"), s.get("trial")) for s in sessions}
    if burned:
        return f"{burned} episodes burned (infra_error)"
    if len(sessions) != episodes or len(keys) != episodes:
        return f"{len(sessions)} sessions, {len(keys)} distinct, {episodes} planned"
    summary = json.loads((out / "summary.json").read_text())
    outages = (summary.get("client") or {}).get("outages") or {}
    if not outages.get("count"):
        return "the outage was not seen (client.outages.count 0)"
    return None


def row_outage(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("outage", "endpoint outages (simulator killed, restarted): 0 episodes burned")
    downs = [2.0] if quick else [5.0, 60.0]
    episodes = 32 if quick else 120

    def one(down: float) -> tuple[float, str | None]:
        work = tmp / f"outage{down:g}"
        work.mkdir()
        return down, outage_case(down, work, episodes)

    for down, why in pmap(one, downs, jobs):
        row.add(f"{down:g} s outage", why, why or "")
    row.note = f"{', '.join(f'{d:g} s' for d in downs)}; {episodes} episodes each"
    return row


# ---- 3. malformed replies ---------------------------------------------------------------------


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip


USAGE = _sse({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
DONE = b"data: [DONE]\n\n"


def _in_stream(bad: bytes) -> bytes:
    return (
        _sse(_chunk({"role": "assistant", "content": ""})) + _sse(_chunk({"content": "ok"})) + bad
        + _sse(_chunk({}, "stop")) + USAGE + DONE
    )  # fmt: skip


@dataclass
class Shape:
    """A whole HTTP reply: status, content type, body; `end` is normal, abort (reset after
    the body), or chunked (no Content-Length: the close ends it)."""

    body: bytes
    status: int = 200
    ctype: str = "text/event-stream"
    end: str = "normal"


def malformed_shapes() -> list[tuple[str, Shape]]:
    from test_client_malformed import FULL_CASES, STREAM_CASES

    shapes = [(f"stream {n}", Shape(_in_stream(bad))) for n, bad, _ in STREAM_CASES]
    shapes += [
        (f"full {n}", Shape(json.dumps(body).encode(), ctype="application/json"))
        for n, body, _ in FULL_CASES
    ]
    shapes += [
        ("full truncated", Shape(b'{"choices": [{"mess', ctype="application/json")),
        ("sse event: error", Shape(
            b"event: error\n" + _sse({"error": {"message": "boom"}}) + DONE)),
        ("no [DONE]", Shape(_sse(_chunk({"content": "a"})) + _sse(_chunk({}, "stop")))),
        ("empty body", Shape(b"")),
        ("only [DONE]", Shape(DONE)),
        ("html page", Shape(b"<html><body>502 Bad Gateway</body></html>", ctype="text/html")),
        ("500 garbage", Shape(bytes(range(256)), status=500, ctype="application/octet-stream")),
        ("reset mid-stream", Shape(_sse(_chunk({"content": "a"})), end="abort")),
        ("reset without length", Shape(_sse(_chunk({"content": "a"})), end="close-reset")),
        ("200 json to a stream", Shape(b'{"ok": true}', ctype="application/json")),
        ("comments only", Shape(b": keep-alive\n\n" * 5 + DONE)),
        ("data without space", Shape(b'data:{"choices":[null]}\n\n' + DONE)),
        ("CR line ends", Shape(_in_stream(b"data: {\"choices\": 5}\r\r"))),
        ("two [DONE] then junk", Shape(DONE + DONE + b"data: {\"x\n\n")),
        ("chunk bigger than 1 MiB", Shape(_in_stream(b"data: " + b"x" * (1 << 20) + b"\n\n"))),
    ]  # fmt: skip
    return shapes


class ShapeServer:
    """Answers every POST with one Shape, on 127.0.0.1, in a thread of its own; counts the
    requests it answered."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.requests = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> ShapeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                await r.readexactly(length)
                path = lines[0].split(" ")[1] if " " in lines[0] else "/"
                if not lines[0].startswith("POST") or "chat/completions" not in path:
                    body = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
                    w.write(self._head(200, "application/json", len(body)) + body)
                    await w.drain()
                    continue
                self.requests += 1
                s = self.shape
                if s.end == "close-reset":  # no length: the body ends with the connection
                    w.write(self._head(s.status, s.ctype, None) + s.body)
                    await w.drain()
                    self._reset(w)
                    return
                w.write(
                    self._head(s.status, s.ctype, len(s.body) + (64 if s.end == "abort" else 0))
                )
                w.write(s.body)
                await w.drain()
                if s.end == "abort":
                    self._reset(w)
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, IndexError):
            pass
        finally:
            with contextlib.suppress(Exception):
                w.close()

    @staticmethod
    def _head(status: int, ctype: str, length: int | None) -> bytes:
        h = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n"
        h += "Connection: close\r\n" if length is None else f"Content-Length: {length}\r\n"
        return (h + "\r\n").encode()

    @staticmethod
    def _reset(w: asyncio.StreamWriter) -> None:
        sock = w.get_extra_info("socket")
        if sock is not None:  # SO_LINGER 0: close sends RST
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        w.transport.abort()


def malformed_case(name: str, shape: Shape, work: Path, observations: list[str]) -> str | None:
    out = work / "run"
    with ShapeServer(shape) as server:
        r = invoke(
            [
                "run", "--out", str(out), "--base-url", f"http://127.0.0.1:{server.port}/v1",
                "--model", "m", "--tasks", "airline/000-001", "--user", "scripted",
                "--concurrency", "2", "--no-preflight", "--no-report", "--no-metrics",
                "--quiet", "--progress", "off",
            ],
            work, 120,
        )  # fmt: skip
        sent = server.requests
    if r.rc is None:
        return "timed out"
    if "Traceback" in r.stderr or "Traceback" in r.stdout:
        return f"traceback: {r.tail()}"
    calls = jsonl(out / "calls.jsonl")
    if sent == 0:
        return f"no request reached the server (exit {r.rc}): {r.tail()}"
    if len(calls) != sent:
        return f"{len(calls)} call records for {sent} requests"
    unsafe = [c for c in calls if c.get("error_kind") == "client_error"]
    if unsafe:  # the client's own safety net: the shape escaped the parser
        return f"{len(unsafe)} calls recorded as client_error: {unsafe[0].get('error_message')}"
    if r.rc not in (0, 1):
        return f"exit {r.rc}: {r.tail()}"
    ok = sum(1 for c in calls if c.get("status") == "ok")
    if ok:  # kept, and said: a reply with no content may be a legitimate empty answer
        observations.append(f"{name}: {ok} of {len(calls)} calls recorded as ok")
    return None


def row_malformed(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("malformed", "malformed reply shapes: every call record kept, no traceback")
    shapes = malformed_shapes()
    if quick:
        shapes = [s for s in shapes if s[0] in ("stream content-int", "sse event: error")]

    def one(item: tuple[int, tuple[str, Shape]]) -> tuple[str, str | None]:
        i, (name, shape) = item
        work = tmp / f"shape{i}"
        work.mkdir()
        return name, malformed_case(name, shape, work, row.observations)

    for name, why in pmap(one, list(enumerate(shapes)), jobs):
        row.add(name, why, why or "")
    return row


# ---- 4. bad input ---------------------------------------------------------------------------


def _special(kind: str, path: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    return path


EP = "endpoints: {agent: {base_url: 'http://127.0.0.1:9/v1', model: m"

EXTRA_CONFIGS: list[tuple[str, str | bytes, str]] = [
    ("tasks-empty-list", "workload: {tasks: []}\n", "workload.tasks"),
    ("agent-skill-7", "sim: {behaviour_options: {agent_skill: 7}}\n", "agent_skill"),
    ("header-name-space", EP + ", headers: {'X A': b}}}\n", "headers"),
    ("extra-body-stream", EP + ", extra_body: {stream: false}}}\n", "stream"),
    ("extra-body-model", EP + ", extra_body: {model: other}}}\n", "model"),
    ("extra-body-messages", EP + ", extra_body: {messages: []}}}\n", "messages"),
    ("sim-profile-nosuch", "sim: {profile: nosuch}\n", "sim.profile"),
    ("sim-fault-kinds", "sim: {fault_kinds: [nosuch]}\n", "sim.fault_kinds"),
    ("sim-options-unknown", "sim: {options: {nosuch: 1}}\n", "sim.options"),
    ("utf8-bom-only", codecs.BOM_UTF8 + b"load: {concurrency: 0}\n", "load.concurrency"),
    ("null-byte-mid", b"out: a\x00b\n", "NUL"),
]


def config_cases() -> list[tuple[str, str | bytes | None, str]]:
    from test_fuzz_config import CASES

    cases: list[tuple[str, str | bytes | None, str]] = [*CASES, *EXTRA_CONFIGS]
    # None: a special path made by config_case (name says which)
    cases += [
        ("a-directory", None, "cannot read"),
        ("missing-file", None, "not found"),
        ("dev-zero", None, "expected a regular file"),
        ("fifo", None, "expected a regular file"),
    ]
    return cases


def config_case(case: tuple[str, str | bytes | None, str], work: Path) -> str | None:
    name, content, needle = case
    path = work / f"{name}.yaml"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    elif name == "a-directory":
        path.mkdir()
    elif name == "dev-zero":
        _special("zero", path)
    elif name == "fifo":
        _special("fifo", path)
    r = invoke(["run", "--config", str(path), "--progress", "off"], work, 60)
    why = one_line_error(r, needle)
    if why is None and (work / "results").exists():
        why = "wrote results"
    return why if why is None else f"{why}: {r.tail()}"


RUN = ["run", "--progress", "off"]
URL = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
EXTRA_FLAGS: list[tuple[str, list[str], str, tuple[int, ...]]] = [
    ("slo-trailing-commas", [*RUN, "--slo", "ttft_p90=1s,,"], "--slo", (2,)),
    ("extra-body-stream", [*RUN, *URL, "--extra-body", '{"stream": false}'], "stream", (2,)),
    ("extra-body-model", [*RUN, *URL, "--extra-body", '{"model": "x"}'], "model", (2,)),
    ("extra-body-messages", [*RUN, *URL, "--extra-body", '{"messages": []}'], "messages", (2,)),
    ("header-name-space", [*RUN, *URL, "--header", "X A: b"], "--header", (2,)),
    ("header-empty-name", [*RUN, *URL, "--header", ": b"], "--header", (2,)),
    ("sim-profile-nosuch", [*RUN, "--sim-profile", "nosuch"], "--sim-profile", (2,)),
    ("out-is-a-file", [*RUN, "--out", "FILE"], "FILE", (2,)),
    ("ray-unresolvable", [*RUN, "--ray", "nosuch.invalid:10001"], "ray", (2,)),
    ("request-seed-text", [*RUN, "--request-seed", "x"], "--request-seed", (2,)),
    ("request-seed-float", [*RUN, "--request-seed", "1.5"], "--request-seed", (2,)),
    ("workers-zero", [*RUN, "--workers", "0"], "--workers", (2,)),
    ("workers-text", [*RUN, "--workers", "many"], "--workers", (2,)),
    ("think-time-negative", [*RUN, "--think-time", "-1"], "--think-time", (2,)),
    ("user-max-tokens-zero", [*RUN, "--user-max-tokens", "0"], "--user-max-tokens", (2,)),
    ("agent-max-tokens-zero", [*RUN, "--agent-max-tokens", "0"], "--agent-max-tokens", (2,)),
    ("api-key-env-unset", [*RUN, *URL, "--api-key-env", "NO_SUCH_VAR_X"], "NO_SUCH_VAR_X", (2,)),
    # SIMURL: a live `agentload sim`, so that nothing else stops the run first
    (
        "metrics-url-ftp",
        [
            *RUN,
            "--base-url",
            "SIMURL",
            "--model",
            "agentload-sim",
            "--tasks",
            "airline/000",
            "--metrics-url",
            "ftp://x/metrics",
            "--out",
            "OUT",
        ],
        "--metrics-url",
        (2,),
    ),
    ("user-model-alone", [*RUN, "--user-model", "m"], "--base-url", (2,)),
    ("tools-serve-port-99999", ["tools", "serve", "--port", "99999"], "--port", (2,)),
    ("tools-serve-port-negative", ["tools", "serve", "--port", "-1"], "--port", (2,)),
    (
        "proxy-port-70000",
        ["proxy", "--port", "70000", "--upstream", "http://127.0.0.1:9", "--out", "OUT"],
        "--port",
        (2,),
    ),
    ("sim-port-99999", ["sim", "--port", "99999"], "--port", (2,)),
    ("sim-speedup-zero", ["sim", "--speedup", "0"], "--speedup", (2,)),
    ("sim-profile-unknown", ["sim", "--profile", "nosuch"], "nosuch", (2,)),
    ("sim-fault-rate-2", ["sim", "--fault-rate", "2"], "--fault-rate", (2,)),
    ("sim-fault-kind", ["sim", "--fault-kinds", "nosuch"], "--fault-kinds", (2,)),
    ("sim-api-key-env-unset", ["sim", "--api-key-env", "NO_SUCH_VAR_X"], "NO_SUCH_VAR_X", (2,)),
    ("sim-api-key-file-missing", ["sim", "--api-key-file", "nope.key"], "nope.key", (2,)),
    ("report-missing", ["report", "nowhere"], "nowhere", (2,)),
    ("report-no-dir", ["report"], "out_dir", (2,)),
    ("export-missing", ["export", "nowhere"], "nowhere", (2,)),
    ("export-format", ["export", "RESUMED", "--format", "xls"], "--format", (2,)),
    ("replay-missing", ["replay", "nope.jsonl", "-q"], "nope.jsonl", (2,)),
    ("replay-no-dataset", ["replay", "-q"], "DATASET", (2,)),
    ("replay-history", ["replay", "DATASET", "--history", "both", "-q"], "history", (2,)),
    ("replay-concurrency-zero", ["replay", "DATASET", "-c", "0", "-q"], "--concurrency", (2,)),
    ("dataset-validate-missing", ["dataset", "validate", "nope.jsonl"], "nope.jsonl", (1, 2)),
    (
        "dataset-validate-format",
        ["dataset", "validate", "DATASET", "--format", "csv"],
        "--format",
        (1, 2),
    ),
    ("metrics-userinfo", ["metrics", "http://u:secretpw@127.0.0.1:9/metrics"], "127.0.0.1", (1, 2)),
    ("metrics-ftp", ["metrics", "ftp://127.0.0.1/metrics"], "ftp", (2,)),
    (
        "call-ftp-url",
        ["call", "--prompt", "hi", "--base-url", "ftp://x", "--model", "m"],
        "--base-url",
        (2,),
    ),
    ("compare-one-run", ["compare", "nowhere"], "two or more", (2,)),
    ("tasks-list-unknown", ["tasks", "list", "--domain", "nosuch"], "nosuch", (2,)),
    ("proxy-no-upstream", ["proxy", "--port", "0", "--out", "OUT"], "--upstream", (2,)),
    ("proxy-upstream-ftp", ["proxy", "--upstream", "ftp://x", "--out", "OUT"], "--upstream", (2,)),
    ("tools-serve-domain", ["tools", "serve", "--domain", "nosuch"], "nosuch", (2,)),
    ("sweep-rate-zero", ["sweep", "--rates", "0"], "--rates", (2,)),
    ("sweep-resume-missing", ["sweep", "-c", "1", "--resume", "nowhere"], "nowhere", (2,)),
    ("version-extra", ["--version", "x"], "", (0, 2)),
    ("help-unknown", ["nosuch", "--help"], "nosuch", (2,)),
    ("run-tau-unknown", [*RUN, "--tau", "x"], "--tau", (2,)),
    ("sim-max-num-seqs-zero", ["sim", "--max-num-seqs", "0"], "--max-num-seqs", (2,)),
    ("replay-rate-negative", ["replay", "DATASET", "--rate", "-1", "-q"], "--rate", (2,)),
    ("tools-serve-port-text", ["tools", "serve", "--port", "x"], "--port", (2,)),
]


def flag_cases() -> list[tuple[str, list[str], str, tuple[int, ...]]]:
    from test_fuzz_cli import CASES

    return [(n, a, needle, (2,)) for n, a, needle in CASES] + EXTRA_FLAGS


def flag_case(case: tuple[str, list[str], str, tuple[int, ...]], work: Path) -> str | None:
    from replay_fixture import write_dataset

    name, args, needle, codes = case
    resumed = work / "resumed"
    resumed.mkdir()
    (resumed / "config.yaml").write_text(
        "schema: agentload.config/1\nout: x\nworkload: {tasks: [airline/000]}\n"
    )
    (work / "FILE").write_text("a file\n")
    subs = {"RESUMED": str(resumed), "FILE": str(work / "FILE"), "OUT": str(work / "out")}
    if "DATASET" in args:
        subs["DATASET"] = str(write_dataset(work / "d.jsonl", n=2))
    sim = None
    if "SIMURL" in args:
        sim = Sim(free_port(), "agentload-sim", work)
        sim.start()
        subs["SIMURL"] = f"http://127.0.0.1:{sim.port}/v1"
    args = [subs.get(a, a) for a in args]
    needle = subs.get(needle, needle)
    try:
        r = invoke(args, work, 60)
    finally:
        if sim is not None:
            sim.kill()
    if name == "version-extra" and r.rc == 0 and "Traceback" not in r.stderr:
        return None
    why = one_line_error(r, needle, codes)
    if why is None and (work / "results").exists():
        why = "wrote results"
    if why is None and "secretpw" in r.stderr + r.stdout:
        why = "printed the URL's password"
    return why if why is None else f"{why}: {r.tail()}"


# -- results folders --


def _base_folder(tmp: Path) -> Path:
    out = tmp / "base"
    r = invoke(
        [
            "run", "--out", str(out), "--sim-profile", "instant", "--sim-speedup", "50",
            "--metrics-interval", "0.1", "--tasks", "airline/000-002", "--trials", "2",
            "--concurrency", "3", "--no-report", "--quiet", "--progress", "off",
        ],
        tmp, 180,
    )  # fmt: skip
    if r.rc != 0:
        raise RuntimeError(f"the base run failed: {r.tail()}")
    return out


def _folder_damage() -> dict[str, Callable[[Path], object]]:
    from test_results_fuzz import CASES, directory, empty, missing

    def swap(name: str, kind: str) -> Callable[[Path], None]:
        def f(d: Path) -> None:  # the file replaced by a FIFO or a link to /dev/zero
            (d / name).unlink()
            _special(kind, d / name)

        return f

    stale = {"pid": 999999, "host": socket.gethostname(), "purpose": "run"}
    extra: dict[str, Callable[[Path], object]] = {
        "calls is /dev/zero": swap("calls.jsonl", "zero"),
        "sessions is a FIFO": swap("sessions.jsonl", "fifo"),
        "trajectories is a FIFO": swap("trajectories.jsonl", "fifo"),
        "run.json is /dev/zero": swap("run.json", "zero"),
        "config.yaml empty": empty("config.yaml"),
        "config.yaml missing": missing("config.yaml"),
        "config.yaml is a FIFO": swap("config.yaml", "fifo"),
        "a stale lock of a dead process": lambda d: (d / ".agentload.lock").write_text(
            json.dumps(stale)
        ),
        "a leftover run.json temporary": lambda d: (d / ".run.json.tmp99999999").write_bytes(b"{"),
        "trajectories is a directory": directory("trajectories.jsonl"),
        "server_metrics is a directory": directory("server_metrics.jsonl"),
        "summary.json is a directory": directory("summary.json"),
    }
    return {**CASES, **extra}


RECORD_FILES = ("calls.jsonl", "sessions.jsonl", "trajectories.jsonl", "server_metrics.jsonl")


def _line_count(d: Path, name: str) -> int:
    n = 0
    for p in (d / name, d / "dropped" / name):
        if p.is_file() and not p.is_symlink():
            n += sum(1 for ln in p.read_bytes().split(b"\n") if ln.strip())
    return n


def folder_case(
    case: tuple[str, str], base: Path, work: Path, damage: Callable[[Path], object]
) -> str | None:
    _, command = case
    d = work / "run"
    shutil.copytree(base, d, symlinks=True)
    damage(d)
    before = {n: _line_count(d, n) for n in RECORD_FILES}
    args = {
        "report": ["report", str(d), "--quiet"],
        "resume": ["run", "--resume", str(d), "--quiet", "--progress", "off"],
        "export": ["export", str(d), "--out", str(work / "export")],
    }[command]
    r = invoke(args, work, 90)
    if r.rc is None:
        return "timed out"
    if "Traceback" in r.stderr + r.stdout:
        return f"traceback: {r.tail()}"
    if r.rc != 0:
        why = one_line_error(r, "", (1, 2))
        return why if why is None else f"{why}: {r.tail()}"
    for n in RECORD_FILES:  # nothing recorded is lost (in its file or set aside)
        if _line_count(d, n) < before[n]:
            return f"{n}: {before[n]} lines before, {_line_count(d, n)} after"
    if command == "resume":
        summary = json.loads((d / "summary.json").read_text())
        if summary["counts"]["sessions"] != 6:
            return f"resume: {summary['counts']['sessions']} sessions in the summary, 6 planned"
    return None


# -- replay datasets --


def _rows(n: int = 2) -> list[dict[str, Any]]:
    from replay_fixture import conversation_rows

    return [r for i in range(n) for r in conversation_rows(i)]


def _dump(rows: Iterable[Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _edit(i: int, **kw: Any) -> Callable[[], bytes]:
    def f() -> bytes:
        rows = _rows(4)
        rows[i] = {**rows[i], **kw}
        return _dump(rows)

    return f


def _tool_row_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[], bytes]:
    def f() -> bytes:
        rows = _rows(4)
        for r in rows:
            if r.get("tool_calls") or r.get("tool_results"):
                change(r)
                break
        return _dump(rows)

    return f


def _calls_args_object(r: dict[str, Any]) -> None:
    if r.get("tool_calls"):
        r["tool_calls"][0]["function"]["arguments"] = {"a": 1}


def _each(n: int, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[], bytes]:
    return lambda: _dump([change(dict(r)) for r in _rows(n)])


def _without(key: str) -> Callable[[], bytes]:
    return _each(2, lambda r: {k: v for k, v in r.items() if k != key})


def _results(**kw: Any) -> Callable[[], bytes]:
    def change(r: dict[str, Any]) -> dict[str, Any]:
        if r.get("tool_results"):
            r["tool_results"] = [{**t, **kw} for t in r["tool_results"]]
        return r

    return _each(4, change)


def _torn_mid() -> bytes:
    lines = _dump(_rows(4)).split(b"\n")
    lines[3] = lines[3][: len(lines[3]) // 2]
    return b"\n".join(lines)


def _interleaved() -> bytes:
    a, b = _rows(1), _rows(2)[len(_rows(1)) :]
    return _dump(a[:2] + b + a[2:])  # conversation 0 split around conversation 1


def _tool_calls_string(r: dict[str, Any]) -> None:
    if r.get("tool_calls"):
        r["tool_calls"] = "x"


def dataset_cases() -> list[tuple[str, Callable[[], bytes]]]:
    def valid() -> bytes:
        return _dump(_rows(4))

    big = {"conversation_id": "big", "turn": 1, "role": "user", "content": "x" * (8 << 20)}
    cases: list[tuple[str, Callable[[], bytes]]] = [
        ("empty file", lambda: b""),
        ("only metadata", lambda: _dump([{"_type": "dataset_metadata", "version": "x"}])),
        ("binary garbage", lambda: bytes(range(256)) * 8),
        ("NUL bytes", lambda: b"\x00" * 4096),
        ("not JSON", lambda: b"hello\nworld\n"),
        ("pretty-printed JSON", lambda: json.dumps(_rows(1), indent=2).encode()),
        ("one JSON array", lambda: json.dumps(_rows(1)).encode()),
        ("top-level numbers", lambda: b"1\n2\n3\n"),
        ("UTF-16", lambda: codecs.BOM_UTF16_LE + valid().decode().encode("utf-16-le")),
        ("latin-1 text", lambda: valid().replace(b"Hello", "H\xe9llo".encode("latin-1"))),
        ("torn last line", lambda: valid()[:-20]),
        ("torn line mid-file", _torn_mid),
        ("turn gap", _edit(2, turn=9)),
        ("turn zero", _edit(0, turn=0)),
        ("turn a string", _edit(1, turn="two")),
        ("turn negative", _edit(1, turn=-1)),
        ("turn 2**64", _edit(1, turn=2**64)),
        ("unknown role", _edit(1, role="wizard")),
        ("role missing", _without("role")),
        ("conversation_id missing", _without("conversation_id")),
        ("conversation_id an object", _edit(0, conversation_id={"a": 1})),
        ("conversation_id unprintable", _each(1, lambda r: {**r, "conversation_id": "a\x01b"})),
        ("starts with assistant", _edit(0, role="assistant")),
        ("content a number", _edit(0, content=5)),
        ("user content null", _edit(0, content=None)),
        ("delay negative", _edit(2, delay_seconds=-1)),
        ("delay 1e308", _edit(2, delay_seconds=1e308)),
        ("delay a string", _edit(2, delay_seconds="soon")),
        ("max_new_tokens zero", _edit(3, max_new_tokens=0)),
        ("max_new_tokens huge", _edit(3, max_new_tokens=10**30)),
        ("tools not a list", _edit(0, tools="all")),
        ("system a list", _edit(0, system=[1, 2])),
        ("tool-call arguments an object", _tool_row_edit(_calls_args_object)),
        ("tool_calls a string", _tool_row_edit(_tool_calls_string)),
        ("tool result content null", _results(content=None)),
        ("tool result names no call", _results(tool_call_id="nosuch")),
        ("rows not contiguous", _interleaved),
        ("duplicate rows", lambda: _dump(_rows(2) + _rows(2)[:1])),
        ("a line of 8 MiB", lambda: valid() + _dump([big])),
        ("CRLF line ends", lambda: valid().replace(b"\n", b"\r\n")),
        ("UTF-8 BOM", lambda: codecs.BOM_UTF8 + valid()),
        ("extra unknown field", _each(2, lambda r: {**r, "colour": "red"})),
        ("blank lines between rows", lambda: valid().replace(b"\n", b"\n\n")),
        ("a directory", lambda: b"DIR"),
        ("a FIFO", lambda: b"FIFO"),
        ("/dev/zero", lambda: b"ZERO"),
    ]  # fmt: skip
    return cases


def dataset_case(case: tuple[str, Callable[[], bytes]], work: Path) -> str | None:
    _, make = case
    path = work / "d.jsonl"
    data = make()
    if data == b"DIR":
        path.mkdir()
    elif data == b"FIFO":
        _special("fifo", path)
    elif data == b"ZERO":
        _special("zero", path)
    else:
        path.write_bytes(data)
    out = work / "out"
    r = invoke(
        [
            "replay", str(path), "--sim-profile", "instant", "--out", str(out),
            "--no-report", "--no-metrics", "-q", "--progress", "off",
        ],
        work, 90,
    )  # fmt: skip
    if r.rc is None:
        return "timed out"
    if "Traceback" in r.stderr + r.stdout:
        return f"traceback: {r.tail()}"
    if r.rc == 0:  # accepted: the run must have replayed every conversation
        sessions = jsonl(out / "sessions.jsonl")
        failed = [s for s in sessions if s.get("termination") in ("internal_error", "error")]
        if not sessions:
            return f"exit 0 with no conversation replayed: {r.tail()}"
        if failed:
            return f"exit 0 with {len(failed)} conversations ended {failed[0].get('termination')}"
        return None
    why = one_line_error(r, "", (2,))
    return why if why is None else f"{why}: {r.tail()}"


# ---- the rows of bad input ---------------------------------------------------------------


def _pick(items: list[Any], quick: bool, n: int = 3) -> list[Any]:
    if not quick or len(items) <= n:
        return items
    step = len(items) // n
    return [items[i * step] for i in range(n)]


def _cases_row(
    row: Row, cases: list[Any], run: Callable[[Any, Path], str | None], jobs: int, tmp: Path
) -> Row:
    def one(item: tuple[int, Any]) -> tuple[Any, str | None]:
        i, case = item
        work = tmp / f"{row.name}{i}"
        work.mkdir()
        return case, run(case, work)

    for case, why in pmap(one, list(enumerate(cases)), jobs):
        name = case[0] if isinstance(case, tuple) else str(case)
        if isinstance(case, tuple) and row.name == "folders":
            name = f"{case[1]}: {case[0]}"
        row.add(str(name), why, why or "")
    return row


def row_config(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("config", "bad config files (`run --config`): one clear line, exit 2")
    return _cases_row(row, _pick(config_cases(), quick), config_case, jobs, tmp)


def row_flags(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("flags", "bad command lines: one clear line naming the flag, exit 2")
    return _cases_row(row, _pick(flag_cases(), quick), flag_case, jobs, tmp)


def row_folders(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("folders", "damaged results folders (`report`, `run --resume`, `export`)")
    damage = _folder_damage()
    base = _base_folder(tmp)
    cases = [(name, cmd) for name in damage for cmd in ("report", "resume", "export")]
    cases = _pick(cases, quick)
    return _cases_row(row, cases, lambda c, w: folder_case(c, base, w, damage[c[0]]), jobs, tmp)


def row_datasets(quick: bool, jobs: int, tmp: Path) -> Row:
    row = Row("datasets", "bad replay datasets (`replay`): one clear line, or replayed")
    return _cases_row(row, _pick(dataset_cases(), quick), dataset_case, jobs, tmp)


BUILDERS: dict[str, Callable[[bool, int, Path], Row]] = {
    "kill": row_kill,
    "outage": row_outage,
    "malformed": row_malformed,
    "config": row_config,
    "flags": row_flags,
    "folders": row_folders,
    "datasets": row_datasets,
}


def probe(only: Iterable[str], quick: bool, jobs: int, tmp: Path | None = None) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="agentload-probe-") as t:
        base = Path(tmp or t)
        for name in only:
            d = base / name
            d.mkdir(parents=True)
            t0 = time.monotonic()
            row = BUILDERS[name](quick, jobs, d)
            row.wall_s = time.monotonic() - t0
            rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    out = ["| row | handled | holds | |", "|---|---:|:---:|---|"]
    for r in rows:
        note = f"{r.note}; " if r.note else ""
        out.append(
            f"| {r.label} | {r.handled}/{r.total} | {'yes' if r.holds else 'NO'} "
            f"| {note}{r.wall_s:.0f} s |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only", default=",".join(ROWS), help=f"rows, comma-separated: {','.join(ROWS)}"
    )
    ap.add_argument("--quick", action="store_true", help="a few cases per row (a smoke test)")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 2))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args()
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    unknown = [x for x in only if x not in BUILDERS]
    if unknown:
        ap.error(f"--only: unknown rows {unknown}; choose from {','.join(ROWS)}")
    rows = probe(only, a.quick, a.jobs)
    if a.json:
        print(json.dumps([
            {"row": r.name, "label": r.label, "handled": r.handled, "total": r.total,
             "holds": r.holds, "note": r.note, "wall_s": round(r.wall_s, 1),
             "failures": r.failures, "observations": r.observations} for r in rows
        ], indent=2))  # fmt: skip
    else:
        print(table(rows))
        for r in rows:
            for f in r.failures:
                print(f"\nNOT HANDLED [{r.name}] {f['case']}: {f['why']}")
            for o in r.observations:
                print(f"\nobserved [{r.name}] {o}")
    sys.exit(0 if all(r.holds for r in rows) else 1)


if __name__ == "__main__":
    main()
