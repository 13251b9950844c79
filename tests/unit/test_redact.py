"""The one set of redaction rules (agentload.redact), pinned: config.yaml, run.json and the
records all go through it."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from agentload import config as config_mod
from agentload.client.endpoint import EndpointConfig
from agentload.redact import (
    REDACTED,
    Scrubber,
    endpoint_secrets,
    is_secret_key,
    redact,
    redact_argv,
    redact_meta,
    redact_url,
)
from agentload.results import recorder as recorder_mod


def test_one_home_for_the_rules() -> None:
    assert config_mod.redact is redact
    assert recorder_mod.redact is redact
    assert config_mod.REDACTED == recorder_mod.REDACTED == REDACTED


def test_secret_key_names() -> None:
    secret = [
        "api_key",
        "API-Key",
        "x-api-key",
        "apikey",
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "token",
        "access_token",
        "refresh-token",
        "hf_token",
        "client_secret",
        "password",
        "db_passwd",
        "credentials",
        "private_key",
        "auth",
    ]
    kept = [
        "api_key_env",
        "max_tokens",
        "prompt_tokens",
        "completion_tokens",
        "model",
        "base_url",
        "temperature",
        "chat_template_kwargs",
        "author",
    ]
    assert [k for k in secret if not is_secret_key(k)] == []
    assert [k for k in kept if is_secret_key(k)] == []


def test_redact_mappings_lists_and_strings() -> None:
    obj = {
        "endpoints": {
            "agent": {
                "base_url": "https://bob:hunter2@gw.example/v1",
                "api_key_env": "VLLM_KEY",
                "headers": {"Authorization": "Bearer sk-123456", "X-Trace": "1"},
                "extra_body": {"api_key": "sk-abcdef", "nested": {"token": {"v": 1}}},
            }
        },
        "notes": ["see http://u:p4ss@h:1/x", "Bearer abcdef123"],
        "empty": {"password": ""},
    }
    r = redact(obj)
    a = r["endpoints"]["agent"]
    assert a["base_url"] == "https://***@gw.example/v1"
    assert a["api_key_env"] == "VLLM_KEY"
    assert a["headers"] == {"Authorization": REDACTED, "X-Trace": "1"}
    assert a["extra_body"] == {"api_key": REDACTED, "nested": {"token": REDACTED}}
    assert r["notes"] == ["see http://***@h:1/x", f"Bearer {REDACTED}"]
    assert r["empty"] == {"password": ""}
    assert obj["endpoints"]["agent"]["api_key_env"] == "VLLM_KEY"  # a copy, input untouched


def test_redact_url() -> None:
    assert redact_url("http://user:pass@host:8000/v1") == "http://***@host:8000/v1"
    assert redact_url("http://user@host/v1") == "http://***@host/v1"
    assert redact_url("http://host/v1?email=a@b") == "http://host/v1?email=a@b"


def test_redact_argv_every_form() -> None:
    argv = [
        "agentload",
        "run",
        "--api-key",
        "sk-1",
        "--api-key=sk-2",
        "--token=abc",
        "--extra-body",
        '{"api_key": "sk-3", "chat_template_kwargs": {"enable_thinking": false}}',
        "--extra-body={'api_key': 'sk-4'}",
        "-H",
        "Authorization: Bearer sk-5",
        "--header",
        "X-Trace: 7",
        "--base-url",
        "http://u:sk-6@127.0.0.1:8000/v1",
        "--api-key-env",
        "VLLM_API_KEY",
        "--concurrency",
        "8",
    ]
    out = redact_argv(argv)
    joined = " ".join(out)
    for i in range(1, 7):
        assert f"sk-{i}" not in joined, (i, out)
    assert out[:4] == ["agentload", "run", "--api-key", REDACTED]
    assert out[4] == f"--api-key={REDACTED}" and out[5] == f"--token={REDACTED}"
    body = orjson.loads(out[7])
    assert body == {"api_key": REDACTED, "chat_template_kwargs": {"enable_thinking": False}}
    assert out[10] == f"Authorization: {REDACTED}" and out[12] == "X-Trace: 7"
    assert out[14] == "http://***@127.0.0.1:8000/v1"
    assert out[15:] == ["--api-key-env", "VLLM_API_KEY", "--concurrency", "8"]
    assert redact_meta({"command": argv, "x": {"secret": 1}})["x"] == {"secret": REDACTED}


def test_endpoint_secrets_and_scrubber() -> None:
    ep = EndpointConfig(
        base_url="http://bob:pa%24s@127.0.0.1:1/v1",
        model="m",
        api_key_env="K",
        headers={"Authorization": "Bearer hdr-secret", "X-Api-Key": "xkey-1", "X-Trace": "t"},
        extra_body={"api_key": "body-secret", "top_k": 5},
        metrics_url="http://m:mpass@127.0.0.1:1/metrics",
    )
    found = endpoint_secrets(ep, env={"K": "env-secret"})
    assert {"env-secret", "hdr-secret", "xkey-1", "body-secret", "pa%24s", "mpass"} <= found
    assert base64.b64encode(b"bob:pa$s").decode() in found
    assert "t" not in found and "5" not in found
    s = Scrubber(found)
    line = orjson.dumps({"error_message": 'echo: "Bearer env-secret" body-secret pa%24s'})
    clean = s.bytes(line)
    assert b"secret" not in clean.replace(b"<redacted>", b"")
    assert orjson.loads(clean)["error_message"].count(REDACTED) == 3
    # Values too short to be keys are not scrubbed (they would mangle records).
    assert not Scrubber(["abc", ""]) and Scrubber(["abcd"])
    quoted = Scrubber(['se"cret'])
    assert quoted.bytes(orjson.dumps({"m": 'x se"cret y'})) == orjson.dumps({"m": "x <redacted> y"})


def test_resume_refuses_a_config_whose_secrets_were_not_saved(tmp_path: Path) -> None:
    import yaml

    from agentload.config import ConfigError
    from agentload.runner import load_saved_config

    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "agent": {
                        "base_url": "http://***@127.0.0.1:9/v1",
                        "model": "m",
                        "headers": {"Authorization": "<redacted>"},
                    }
                }
            }
        )
    )
    with pytest.raises(ConfigError, match=r"endpoints\.agent\.base_url.*headers\.Authorization"):
        load_saved_config(tmp_path)
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({"endpoints": {"agent": {"base_url": "http://h:9/v1", "model": "m"}}})
    )
    assert load_saved_config(tmp_path).endpoints["agent"].model == "m"
