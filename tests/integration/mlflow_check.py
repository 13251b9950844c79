"""Log a results folder and a sweep folder to each MLflow store given, read them back through
MLflow's own client and print what MLflow holds as JSON (the test asserts on it).

    python mlflow_check.py RUN_DIR SWEEP_DIR URI [URI ...]

Run by tests/integration/test_mlflow_stores.py with the dev environment's MLflow (3.x) and with
a small venv's MLflow 2, so one script checks both."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import mlflow
import orjson
from mlflow.tracking import MlflowClient

from agentload.integrations import mlflow as ml


def _files(client: MlflowClient, run_id: str) -> dict[str, list[str]]:
    top = sorted(a.path for a in client.list_artifacts(run_id))
    charts = sorted(a.path for a in client.list_artifacts(run_id, "charts"))
    return {"artifacts": top, "charts": charts}


def _run(client: MlflowClient, run_id: str) -> dict[str, Any]:
    r = client.get_run(run_id)
    return {
        "name": r.info.run_name,
        "params": dict(r.data.params),
        "metrics": dict(r.data.metrics),
        "tags": {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.source")},
        **_files(client, run_id),
    }


def check(uri: str, run_dir: Path, sweep_dir: Path) -> dict[str, Any]:
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    run_id = ml.log_run(run_dir, summary, uri=uri)
    doc = orjson.loads((sweep_dir / "sweep.json").read_bytes())
    parent_id = ml.log_sweep(sweep_dir, doc, uri=uri)
    client = MlflowClient(tracking_uri=uri)
    parent = _run(client, parent_id)
    exp = client.get_run(parent_id).info.experiment_id
    kids = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    parent["children"] = sorted(
        (_run(client, k.info.run_id) for k in kids), key=lambda c: float(c["params"]["sweep.point"])
    )
    return {"run": _run(client, run_id), "sweep": parent}


def main() -> None:
    run_dir, sweep_dir, *uris = sys.argv[1:]
    out: dict[str, Any] = {"version": mlflow.__version__, "stores": {}, "seconds": {}}
    for i, uri in enumerate(uris):
        # An experiment per store: two of them may share one database (see the test).
        os.environ["MLFLOW_EXPERIMENT_NAME"] = f"agentload-check-{i}"
        t0 = time.monotonic()
        out["stores"][uri] = check(uri, Path(run_dir), Path(sweep_dir))
        out["seconds"][uri] = round(time.monotonic() - t0, 1)
    print("MLFLOW_CHECK " + json.dumps(out))


if __name__ == "__main__":
    main()
