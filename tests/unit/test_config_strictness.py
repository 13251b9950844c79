"""Settings that used to be accepted silently, or refused with a multi-line dump: each is now
one line naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from agentload.config import ConfigError, build_config, config_to_dict
from agentload.units import parse_slo

URL = "http://127.0.0.1:9/v1"


def _refused(data: dict[str, Any], *, flags: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        build_config(data=data, flags=flags)
    msg = str(e.value)
    assert "\n" not in msg and "pydantic" not in msg, msg
    return msg


@pytest.mark.parametrize("skill", [7, -0.1, "x", True])
def test_behaviour_option_out_of_range(skill: Any) -> None:
    msg = _refused({"sim": {"behaviour_options": {"agent_skill": skill}}})
    assert "field 'sim.behaviour_options'" in msg and "agent_skill" in msg


def test_behaviour_option_in_range_is_kept() -> None:
    cfg = build_config(data={"sim": {"behaviour_options": {"agent_skill": "0.5"}}})
    assert cfg.sim.behaviour_options == {"agent_skill": "0.5"}


@pytest.mark.parametrize(
    ("sim", "field", "flag"),
    [
        ({"profile": "nosuch"}, "sim.profile", "--sim-profile"),
        ({"fault_kinds": ["nosuch"]}, "sim.fault_kinds", None),
        ({"fault_kinds": "http_500,nosuch"}, "sim.fault_kinds", None),
        ({"options": {"nosuch": 1}}, "sim.options", None),
        ({"options": {"mean_output_tokens": -1}}, "sim.options", None),
    ],
)
def test_embedded_simulator_settings_are_one_line(
    sim: dict[str, Any], field: str, flag: str | None
) -> None:
    flags = {"sim.profile": "--sim-profile", "sim.speedup": "--sim-speedup"}
    msg = _refused({"sim": sim}, flags=flags)
    assert f"field '{field}'" in msg and "errors.pydantic.dev" not in msg
    if flag:
        assert f"flag {flag}:" in msg and "--sim-speedup" not in msg


def test_embedded_simulator_settings_that_are_right_pass() -> None:
    cfg = build_config(
        data={"sim": {"profile": "instant", "fault_kinds": ["reset"], "options": {"seed": 3}}}
    )
    assert cfg.sim.fault_kinds == ["reset"]


@pytest.mark.parametrize("name", ["X Bad", "X:Y", "", "Bad\r\nInjected"])
def test_header_name_that_is_not_a_token(name: str) -> None:
    data = {"endpoints": {"agent": {"base_url": URL, "model": "m", "headers": {name: "v"}}}}
    msg = _refused(data, flags={"endpoints.agent.headers": "--header"})
    assert "flag --header: field 'endpoints.agent.headers': not a valid HTTP header name" in msg
    assert f"(got {name!r})" in msg


def test_header_names_that_are_tokens_pass() -> None:
    headers = {"X-Tenant": "a", "x_b.c~1": "b", "Authorization": "Bearer k"}
    cfg = build_config(
        data={"endpoints": {"agent": {"base_url": URL, "model": "m", "headers": headers}}}
    )
    assert cfg.endpoints["agent"].headers == headers


@pytest.mark.parametrize(
    "key", ["stream", "model", "messages", "tools", "tool_choice", "max_tokens", "seed"]
)
def test_extra_body_that_overrides_the_request_is_refused(key: str) -> None:
    data = {"endpoints": {"agent": {"base_url": URL, "model": "m", "extra_body": {key: False}}}}
    msg = _refused(data, flags={"endpoints.agent.extra_body": "--extra-body"})
    assert f"flag --extra-body: field 'endpoints.agent.extra_body.{key}'" in msg
    assert f"{key!r} is part of the request agentload builds" in msg


def test_extra_body_of_other_fields_passes() -> None:
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True}
    cfg = build_config(
        data={"endpoints": {"agent": {"base_url": URL, "model": "m", "extra_body": extra}}}
    )
    assert cfg.endpoints["agent"].extra_body == extra


@pytest.mark.parametrize("spec", ["ttft_p90=1s,,", ",ttft_p90=1s", "ttft_p90=1s, ,e2e_p99=5s"])
def test_slo_with_an_empty_term(spec: str) -> None:
    with pytest.raises(ValueError, match="empty SLO term"):
        parse_slo(spec)
    msg = _refused({"slo": spec}, flags={"slo": "--slo"})
    assert "flag --slo: field 'slo': empty SLO term" in msg


def test_slo_without_empty_terms() -> None:
    assert parse_slo("ttft_p90=1s,e2e_p99=5s") == {"ttft_p90": 1.0, "e2e_p99": 5.0}
    assert parse_slo("") == {}


def test_saved_config_has_no_empty_task_list() -> None:
    saved = config_to_dict(build_config(data={}))
    assert "tasks" not in saved["workload"]
    # and it reads back to the same plan
    assert build_config(data=saved).workload.tasks == []
    picked = config_to_dict(build_config(data={"workload": {"tasks": ["airline/000"]}}))
    assert picked["workload"]["tasks"] == ["airline/000"]
