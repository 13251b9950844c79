"""deploy/: the Kubernetes manifests validate against the Kubernetes schemas (the ones
kubernetes-validate bundles, offline), the benchmark configuration they mount is a valid run
configuration, every agentload flag their commands use exists, and the image runs agentload
as a non-root user."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentload.cli.call import CALL_OPTIONS
from agentload.cli.options import RUN_OPTIONS
from agentload.config import build_config

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
# Native sidecars (init containers with restartPolicy Always) are on by default from 1.29;
# podFailurePolicy is GA from 1.31.
K8S_VERSION = "1.31"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _all_docs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{p.name}:{d['kind']}/{d['metadata']['name']}", d) for p in MANIFESTS for d in _docs(p)
    ]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [(name, d["spec"]["template"]["spec"]) for name, d in _all_docs() if d["kind"] == "Job"]


def test_manifests_exist() -> None:
    names = {p.name for p in MANIFESTS}
    assert {"job.yaml", "job-gateway-sidecar.yaml", "results-pvc.yaml", "config.yaml"} <= names


@pytest.mark.parametrize("name,doc", _all_docs(), ids=[n for n, _ in _all_docs()])
def test_manifest_validates_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    # strict: a misspelt or misplaced field (unknown to the schema) fails too.
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_validation_can_fail() -> None:
    doc = _docs(DEPLOY / "kubernetes" / "job.yaml")[0]
    doc["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_references_resolve_within_deploy() -> None:
    """Every ConfigMap, PVC and volume a Job names is defined in deploy/kubernetes."""
    defined = {(d["kind"], d["metadata"]["name"]) for _, d in _all_docs()}
    for name, spec in _pod_specs():
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec.get("initContainers", []) + spec["containers"]:
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (name, c["name"], m["name"])
            for ref in c.get("envFrom", []):
                assert ("ConfigMap", ref["configMapRef"]["name"]) in defined, name
        for v in volumes.values():
            if "configMap" in v:
                assert ("ConfigMap", v["configMap"]["name"]) in defined, (name, v)
            if "persistentVolumeClaim" in v:
                pvc = v["persistentVolumeClaim"]["claimName"]
                assert ("PersistentVolumeClaim", pvc) in defined, (name, v)


def test_benchmark_config_is_a_valid_run_config() -> None:
    (cm,) = _docs(DEPLOY / "kubernetes" / "config.yaml")
    data = yaml.safe_load(cm["data"]["config.yaml"])
    cfg = build_config(
        data=data,
        overrides={"endpoints.agent.base_url": "http://vllm:8000/v1", "endpoints.agent.model": "m"},
    )
    assert cfg.load.concurrency == 16
    assert cfg.workload.domains == ["airline", "retail"]


def _flags(options: Any) -> set[str]:
    return {f for o in options for f in o.decls}


def _agentload_commands(script: str) -> list[list[str]]:
    words = shlex.split(script.replace("\\\n", " "), comments=True)
    cmds, cur = [], None
    for w in words:
        if w == "agentload":
            cur = []
            cmds.append(cur)
        elif w in {";", "do", "then", "fi", "done"} or w.endswith(";"):
            cur = None
        elif cur is not None:
            cur.append(w)
    return cmds


def test_commands_use_only_existing_flags() -> None:
    known = {"run": _flags(RUN_OPTIONS) | {"--help"}, "call": _flags(CALL_OPTIONS)}
    seen = set()
    for name, spec in _pod_specs():
        for c in spec.get("initContainers", []) + spec["containers"]:
            for script in c.get("args", []):
                for cmd in _agentload_commands(script):
                    sub, *args = cmd
                    flags = {a for a in args if a.startswith("--")}
                    unknown = flags - known[sub]
                    assert not unknown, f"{name} {c['name']}: agentload {sub} has no {unknown}"
                    seen.add(sub)
    assert seen == {"run", "call"}


def test_agentload_runs_as_non_root_with_a_writable_results_volume() -> None:
    for name, spec in _pod_specs():
        assert spec["securityContext"]["fsGroup"] == 10001, name
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["image"].startswith("agentload"):
                sc = c["securityContext"]
                assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001, (name, c["name"])


def test_a_bad_configuration_fails_the_job_without_retries() -> None:
    """Exit code 2 (bad flag or configuration) ends the Job; a retry would not help."""
    for name, d in _all_docs():
        if d["kind"] != "Job":
            continue
        rules = d["spec"]["podFailurePolicy"]["rules"]
        fail = [r for r in rules if r["action"] == "FailJob"]
        assert fail and fail[0]["onExitCodes"]["values"] == [2], name


def test_dockerfile_installs_agentload_as_non_root_entrypoint() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    assert stages and all(s.startswith("python:${PYTHON_VERSION}-slim") for s in stages)
    assert re.search(r"^ARG PYTHON_VERSION=3\.11$", text, re.M)
    assert re.search(r"^USER 10001", text, re.M)
    assert re.search(r'^ENTRYPOINT \["agentload"\]$', text, re.M)
    # The build context is the repository root; .dockerignore keeps it to what the wheel needs.
    ignore = (DEPLOY.parent / ".dockerignore").read_text().split()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M)
    for src in " ".join(copied).split():
        assert f"!{src.rstrip('/')}" in [i.rstrip("/") for i in ignore], src
