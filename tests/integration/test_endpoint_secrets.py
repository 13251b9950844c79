"""One collector of an endpoint's secret values (`redact.endpoint_secrets`) serves the client
(error messages it records) and the run's scrubber (every line written): a header secret a
server echoes back is hidden by both, in every form it may take."""

from __future__ import annotations

import base64

import orjson

from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from agentload.redact import REDACTED, Scrubber, endpoint_secrets
from scripted_server import Script, ScriptedServer

BASIC = base64.b64encode(b"bob:hunter22pw").decode()
HEADERS = {
    "Authorization": f"Basic {BASIC}",
    "X-Auth-Token": "Token tok-9f8e7d6c",
    "X-Forwarded-Auth": "Bearer brr-1234567",  # not a secret-looking name: found by its scheme
    "X-Trace": "trace-42",
}
ECHO = f"denied: bob:hunter22pw via {BASIC}; token tok-9f8e7d6c; Bearer brr-1234567; trace-42"


def test_header_secrets_in_every_form() -> None:
    ep = EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", headers=HEADERS)
    found = endpoint_secrets(ep)
    assert {
        f"Basic {BASIC}",
        BASIC,
        "bob:hunter22pw",
        "hunter22pw",
        "Token tok-9f8e7d6c",
        "tok-9f8e7d6c",
        "brr-1234567",
    } <= found
    assert "trace-42" not in found and not any(len(s) < 4 for s in found)
    clean = Scrubber(found).text(ECHO)
    for secret in ("hunter22pw", BASIC, "tok-9f8e7d6c", "brr-1234567"):
        assert secret not in clean
    assert clean.endswith("trace-42")


async def test_an_echoed_header_secret_is_redacted_in_the_record() -> None:
    async with ScriptedServer() as server:
        server.scripts["default"] = Script(
            parts=[(0, orjson.dumps({"error": {"message": ECHO}}))],
            status=401,
            content_type="application/json",
        )
        ep = EndpointConfig(
            base_url=server.base_url,
            model="m",
            headers=HEADERS,
            retry=RetryPolicy(max_attempts=1),
        )
        async with ChatClient(ep) as client:
            res = await client.chat([{"role": "user", "content": "hi"}])
    msg = res.record.error_message or ""
    assert res.record.error_kind == "http_401" and REDACTED in msg
    for secret in ("hunter22pw", BASIC, "tok-9f8e7d6c", "brr-1234567"):
        assert secret not in msg
    assert "trace-42" in msg


def test_a_secret_holding_another_is_redacted_whole() -> None:
    from agentload.client.safety import redact

    for order in (["hunter22pw", "bob:hunter22pw"], ["bob:hunter22pw", "hunter22pw"]):
        assert redact("denied bob:hunter22pw", order) == f"denied {REDACTED}"
