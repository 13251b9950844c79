"""What `endpoint_secrets` knows to scrub, whatever the secret's source, and where the
recorder applies it."""

from __future__ import annotations

import base64
from pathlib import Path

from agentload.client.endpoint import EndpointConfig
from agentload.redact import REDACTED, Scrubber, endpoint_secrets, url_secrets
from agentload.results.recorder import Recorder


def _ep(**kw: object) -> EndpointConfig:
    return EndpointConfig(base_url="http://127.0.0.1:1", model="m", **kw)  # type: ignore[arg-type]


def test_the_implicit_key_is_a_secret_only_when_it_is_the_one_sent() -> None:
    env = {"OPENAI_API_KEY": "sk-implicit-0123456789", "MY_KEY": "named-key-abcdef"}
    assert "sk-implicit-0123456789" in endpoint_secrets(_ep(), env)
    named = endpoint_secrets(_ep(api_key_env="MY_KEY"), env)
    assert "named-key-abcdef" in named and "sk-implicit-0123456789" not in named
    assert endpoint_secrets(_ep(), {}) == set()


def test_secret_shaped_values_of_any_header_are_secrets() -> None:
    ep = _ep(
        headers={
            "X-Custom": "sk-customHeader0123",
            "X-Gateway": "Bearer gwtoken-4567",
            "X-Tenant": "bench",  # neither named nor shaped like a secret: kept
            "X-Api-Key": "plainvalue-89",
        },
        extra_body={"metadata": {"note": "api_key=inline-secret-1"}},
    )
    found = endpoint_secrets(ep, {})
    assert {"sk-customHeader0123", "gwtoken-4567", "plainvalue-89", "inline-secret-1"} <= found
    assert "bench" not in found


def test_placeholder_keys_are_not_scrubbed() -> None:
    assert endpoint_secrets(_ep(), {"OPENAI_API_KEY": "EMPTY"}) == set()
    scrub = Scrubber(["EMPTY", "dummy", "real-secret-value"])
    assert scrub.text("EMPTY dummy real-secret-value") == f"EMPTY dummy {REDACTED}"


def test_url_secrets_in_every_form() -> None:
    found = url_secrets("http://alice:p%40ssword@h:1/v1")
    basic = base64.b64encode(b"alice:p@ssword").decode()
    assert {"p%40ssword", "p@ssword", "alice:p%40ssword", basic} <= found
    assert url_secrets("http://h:1/v1") == set()


def test_recorder_scrubs_config_and_run_json(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.add_secrets(["opaque-secret-0042"])
    rec.write_config({"endpoints": {"agent": {"headers": {"X-Note": "opaque-secret-0042"}}}})
    rec.write_meta({"status": "failed: server said opaque-secret-0042"})
    rec.close()
    for name in ("config.yaml", "run.json"):
        text = (tmp_path / name).read_text()
        assert "opaque-secret-0042" not in text and REDACTED in text, name
