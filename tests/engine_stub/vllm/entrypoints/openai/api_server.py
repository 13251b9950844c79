"""Stand-in for vLLM's OpenAI server module, for the launcher's tests.

It takes the flags agentload's launcher passes to vLLM and serves the agentload simulator
there, so process handling (health wait, logs, caches, group stop) is tested over real HTTP
without vLLM. STUB_MODE picks a behaviour: ok (default), crash, hang, stubborn (ignores
SIGTERM). STUB_CHILD_PID_FILE: start a child in the same process group and write its pid.
STUB_ENV_FILE: write the environment seen, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args, rest = p.parse_known_args()
    print(f"stub engine: model={args.model} extra={rest}", flush=True)
    if os.environ.get("STUB_ENV_FILE"):
        with open(os.environ["STUB_ENV_FILE"], "w") as f:
            json.dump(dict(os.environ), f)
    if os.environ.get("STUB_CHILD_PID_FILE"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["STUB_CHILD_PID_FILE"], "w") as f:
            f.write(str(child.pid))
    mode = os.environ.get("STUB_MODE", "ok")
    if mode == "crash":
        print("RuntimeError: stub engine cannot load the model", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)

    from agentload.sim.api import run_blocking
    from agentload.sim.settings import SimConfig

    run_blocking(
        SimConfig(
            host=args.host,
            port=args.port,
            model=args.served_model_name or args.model,
            speedup=50,
            log_interval_s=0,
        )
    )


if __name__ == "__main__":
    main()
