"""A saved configuration keeps agentload's own fields whose names look like secrets, so it
loads back for --resume; real secrets beside them are still hidden."""

from __future__ import annotations

from agentload.config import build_config, config_to_dict
from agentload.redact import REDACTED, is_secret_key, redact


def test_own_fields_are_not_secrets() -> None:
    assert not is_secret_key("first_token")
    assert is_secret_key("hf_token") and is_secret_key("token") and is_secret_key("api_key")


def test_a_redacted_config_with_an_endpoint_loads_back() -> None:
    cfg = build_config(
        data={
            "endpoints": {
                "agent": {
                    "base_url": "http://u:pw@127.0.0.1:8000/v1",
                    "model": "m",
                    "headers": {"Authorization": "Bearer sk-abcdefghijkl"},
                    "extra_body": {"hf_token": "hf_abcdefgh"},
                    "timeouts": {"first_token": 120},
                }
            }
        }
    )
    saved = redact(config_to_dict(cfg))
    agent = saved["endpoints"]["agent"]
    assert agent["timeouts"]["first_token"] == 120
    assert agent["headers"]["Authorization"] == REDACTED
    assert agent["extra_body"]["hf_token"] == REDACTED
    assert "pw" not in agent["base_url"]
    again = build_config(data=saved)
    assert again.endpoints["agent"].timeouts.first_token == 120
