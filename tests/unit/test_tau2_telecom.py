"""agentload's τ²-bench telecom domain against facts recorded from τ²-bench 1.0.1 itself
(tests/data/tau2/telecom.json): both sides' tool schemas, tool kinds, the database hashes,
the policies, and every one of the 2,285 tasks: its gold replay (hashes of both databases,
the answers' text, the error count), its env assertions after the gold replay (all pass) and
right after initialization (as τ² found them). Then direct probes of answers whose exact
text was recorded from τ², error paths, and the back office / phone sync."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

# Imported as a module path: the package also has a `telecom()` domain factory.
import agentload.domains.tau2.telecom as tel
from agentload.domains.tau2.toolkit import World

REF: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "tau2" / "telecom.json").read_text()
)
JOHN = {"name": "John Smith", "phone_number": "555-123-2002"}
BAR_5G = "Status Bar: 📶³ Good | 5G | 📱 Data Enabled | 🔋 80%"


@cache
def _tasks(folder: Path) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = json.loads((folder / "tasks.json").read_text())
    return tasks


def _world(tau2_data: Path) -> World:
    return tel.make_world(tau2_data / "telecom")


def _initialized(tau2_data: Path, task: dict[str, Any]) -> World:
    """A task's world as τ²'s evaluator sets it up (no telecom task has initialization data
    or a message history)."""
    init = task.get("initial_state") or {}
    assert not init.get("initialization_data") and not init.get("message_history")
    world = _world(tau2_data)
    for a in init.get("initialization_actions") or ():
        world.run_function(a["env_type"], a["func_name"], a["arguments"])
    world.sync()
    return world


def _assertions_pass(world: World, task: dict[str, Any]) -> bool:
    """τ²'s evaluation of a task's env assertions: each runs (then syncs) and must return a
    bool equal to its assert_value."""
    ok = True
    for a in task["evaluation_criteria"].get("env_assertions") or ():
        res = world.run_function(a["env_type"], a["func_name"], a["arguments"])
        assert isinstance(res, bool), a
        ok = (res == a.get("assert_value", True)) and ok
    return ok


def _sha(texts: list[str]) -> str:
    return hashlib.sha256("\n\x00".join(texts).encode()).hexdigest()


# --------------------------------------------------------------------------------------
# Facts recorded from τ²


def test_schemas_match_tau2() -> None:
    assert tel.AGENT_KIT.schemas() == REF["agent_tools"]
    assert tel.USER_KIT is not None
    assert tel.USER_KIT.schemas() == REF["user_tools"]


def test_tool_kinds_match_tau2() -> None:
    def kinds(kit: Any) -> list[list[Any]]:
        return [[s.name, s.kind, s.mutates] for s in kit.SPECS.values()]

    assert kinds(tel.AGENT_KIT) == REF["tool_kinds"]["agent"]
    assert kinds(tel.USER_KIT) == REF["tool_kinds"]["user"]


def test_initial_hashes_and_policies(tau2_data: Path) -> None:
    world = _world(tau2_data)
    assert world.db_hash() == REF["initial_db_hash"]
    assert world.user_db_hash() == REF["initial_user_db_hash"]
    folder = tau2_data / "telecom"
    assert hashlib.sha256(tel.policy(folder).encode()).hexdigest() == REF["policy_sha256"]
    workflow = hashlib.sha256(tel.workflow_policy(folder).encode()).hexdigest()
    assert workflow == REF["workflow_policy_sha256"]
    assert tel.policy(folder).startswith("<main_policy>\n")
    assert tel.policy(folder).endswith("\n</tech_support_policy>")


def test_every_task_gold_replay_and_assertions(tau2_data: Path) -> None:
    """All 2,285 tasks: gold replay facts, assertions after it, and after doing nothing."""
    tasks = _tasks(tau2_data / "telecom")
    assert len(tasks) == len(REF["tasks"]) == 2285
    assert REF["gold_assertions_all_pass"] is True
    wrong: list[tuple[str, str]] = []
    noop_failing = 0
    for task in tasks:
        ref = REF["tasks"][task["id"]]
        world = _initialized(tau2_data, task)
        texts, errors = [], 0
        for a in task["evaluation_criteria"].get("actions") or ():
            text, error = world.call(a["requestor"], a["name"], a["arguments"])
            texts.append(text)
            errors += error
        got = {
            "db_hash": world.db_hash(),
            "user_db_hash": world.user_db_hash(),
            "outputs_sha256": _sha(texts),
            "errors": errors,
        }
        wrong += [(task["id"], k) for k, v in got.items() if v != ref[k]]
        if not _assertions_pass(world, task):
            wrong.append((task["id"], "gold assertions"))
        noop = _assertions_pass(_initialized(tau2_data, task), task)
        if noop != ref["noop_assertions_pass"]:
            wrong.append((task["id"], "no-op assertions"))
        noop_failing += not noop
    assert wrong == []
    # Doing nothing fails almost every task (the 32 that pass want a transfer only).
    assert noop_failing == 2285 - 32


# --------------------------------------------------------------------------------------
# Answers recorded from τ²


def test_back_office_answers(tau2_data: Path) -> None:
    w = _world(tau2_data)
    text, error = w.call("assistant", "get_details_by_id", {"id": "L1002"})
    assert not error
    assert text == (
        '{"line_id": "L1002", "phone_number": "555-123-2002", "status": "Active", '
        '"plan_id": "P1002", "device_id": "D1002", "data_used_gb": 8.7, '
        '"data_refueling_gb": 0.0, "roaming_enabled": true, "contract_end_date": "2026-12-31", '
        '"last_plan_change_date": "2024-12-15", "last_sim_replacement_date": "2025-01-20", '
        '"suspension_start_date": null}'
    )
    text, _ = w.call("assistant", "get_customer_by_id", {"customer_id": "C1004"})
    assert text == (
        '{"customer_id": "C1004", "full_name": "Emma Wilson", "date_of_birth": "1995-08-17", '
        '"email": "emma.w@example.com", "phone_number": "555-123-1004", "address": '
        '{"street": "101 River Rd", "city": "Austin", "state": "TX", "zip_code": "73301"}, '
        '"account_status": "Pending Verification", "payment_methods": [], "line_ids": [], '
        '"bill_ids": [], "created_at": "2025-01-25 16:20:00", "last_extension_date": null, '
        '"goodwill_credit_used_this_year": 0.0}'
    )
    # A plain dict answer: τ² writes its numbers as strings.
    text, _ = w.call("assistant", "get_data_usage", {"customer_id": "C1001", "line_id": "L1002"})
    assert text == (
        '{"line_id": "L1002", "data_used_gb": "8.7", "data_limit_gb": "15.0", '
        '"data_refueling_gb": "0.0", "cycle_end_date": "2025-02-28"}'
    )
    text, _ = w.call(
        "assistant", "suspend_line", {"customer_id": "C1001", "line_id": "L1002", "reason": "x"}
    )
    assert text.startswith(
        '{"message": "Line suspended successfully. $5/month holding fee will apply.", '
        '"line": {"line_id": "L1002",'
    )
    assert text.endswith('"suspension_start_date": "2025-02-25"}}')


def test_back_office_errors(tau2_data: Path) -> None:
    w = _world(tau2_data)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("get_customer_by_id", {"customer_id": "C9"}, "Error: Customer with ID C9 not found"),
        ("get_details_by_id", {"id": "X1"}, "Error: Unknown ID format or type: X1"),
        ("get_details_by_id", {"id": "P9"}, "Error: Plan with ID P9 not found"),
        (
            "get_customer_by_id",
            {},
            "Error: TelecomTools.get_customer_by_id() missing 1 required positional "
            "argument: 'customer_id'",
        ),
        (
            "enable_roaming",
            {"customer_id": "C1002", "line_id": "L1002"},
            "Error: Line L1002 not found for customer C1002",
        ),
        (
            "refuel_data",
            {"customer_id": "C1001", "line_id": "L1002", "gb_amount": -1},
            "Error: Refuel amount must be positive",
        ),
        (
            "resume_line",
            {"customer_id": "C1001", "line_id": "L1002"},
            "Error: Line must be suspended to resume",
        ),
        ("nope", {}, "Error: Tool 'nope' not found."),
    ]
    before = w.db_hash()
    for name, args, want in cases:
        assert w.call("assistant", name, args) == (want, True), name
    assert w.db_hash() == before
    # A user cannot call the agent's tools.
    assert w.call("user", "get_customer_by_id", {"customer_id": "C1001"}) == (
        "Error: Tool 'get_customer_by_id' not found.",
        True,
    )


def test_phone_answers(tau2_data: Path) -> None:
    w = _world(tau2_data)
    w.run_function("user", "set_user_info", JOHN)
    assert w.call("user", "check_network_status", {}) == (
        "Airplane Mode: OFF\nSIM Card Status: active\nCellular Connection: connected\n"
        "Cellular Signal: good\nCellular Network Type: 5G\nMobile Data Enabled: Yes\n"
        "Data Roaming Enabled: No\nWi-Fi Radio: OFF\nWi-Fi Connected: No",
        False,
    )
    assert w.call("user", "set_network_mode_preference", {"mode": "5g"}) == (
        "Failed to set network mode: '5g' is not a valid option. Please use one of: "
        f"4g_5g_preferred, 4g_only, 3g_only, 2g_only\n{BAR_5G}",
        False,
    )
    assert w.call(
        "user", "grant_app_permission", {"app_name": "messaging", "permission": "Camera"}
    ) == (
        "Error. Permission 'camera' not tracked for app 'messaging', available permissions: "
        f"['sms', 'storage', 'phone', 'network']\n{BAR_5G}",
        False,
    )
    # pydantic's validation report, as τ² lets it through.
    text, error = w.call(
        "user", "set_apn_settings", {"apn_settings": {"apn_name": "x", "mms_port": "p", "e": [1]}}
    )
    assert error
    assert text == (
        "Error: 3 validation errors for APNSettings\napn_name\n  Input should be 'internet' or "
        "'broken' [type=enum, input_value='x', input_type=str]\n    For further information "
        "visit https://errors.pydantic.dev/2.14/v/enum\nmms_port\n  Input should be a valid "
        "integer, unable to parse string as an integer [type=int_parsing, input_value='p', "
        "input_type=str]\n    For further information visit "
        "https://errors.pydantic.dev/2.14/v/int_parsing\ne\n  Extra inputs are not permitted "
        "[type=extra_forbidden, input_value=[1], input_type=list]\n    For further information "
        "visit https://errors.pydantic.dev/2.14/v/extra_forbidden"
    )
    w.run_function("user", "break_vpn", {})
    assert w.call("user", "check_vpn_status", {}) == (
        "VPN is ON and connected. Details: {'server_address': '192.168.1.1', 'protocol': "
        "'OpenVPN', 'server_performance': <PerformanceLevel.POOR: 'poor'>}",
        False,
    )
    assert w.call("user", "run_speed_test", {}) == (
        "Speed Test Result: 22.00 Mbps (Fair). Connection is okay for web browsing and some "
        "standard definition streaming.",
        False,
    )


def test_vpn_profile_degradation_lasts_the_episode(tau2_data: Path) -> None:
    """τ²'s break_vpn degrades the profile that connect_vpn reuses: a reconnect stays slow
    within the episode, and a new episode starts with a fast one."""
    w = _world(tau2_data)
    w.run_function("user", "break_vpn", {})
    w.call("user", "disconnect_vpn", {})
    w.call("user", "connect_vpn", {})
    assert "<PerformanceLevel.POOR: 'poor'>" in w.call("user", "check_vpn_status", {})[0]
    fresh = _world(tau2_data)
    fresh.call("user", "connect_vpn", {})
    assert "EXCELLENT" in fresh.call("user", "check_vpn_status", {})[0]


def test_payment_round_trip_syncs_both_sides(tau2_data: Path) -> None:
    w = _world(tau2_data)
    w.run_function("user", "set_user_info", JOHN)
    assert w.call("user", "check_payment_request", {}) == (
        "No payment request has been made.",
        False,
    )
    w.call("assistant", "send_payment_request", {"customer_id": "C1001", "bill_id": "B1002"})
    assert w.call("user", "check_payment_request", {}) == (
        "You have a payment request for bill B1002 of 150.0 USD.",
        False,
    )
    assert w.call("user", "make_payment", {}) == (
        "Payment of 150.0 USD has been made for bill B1002.",
        False,
    )
    assert w.call("user", "check_payment_request", {})[0] == "No payment request has been made."
    bill = json.loads(w.call("assistant", "get_details_by_id", {"id": "B1002"})[0])
    assert bill["status"] == "Paid"
    assert w.call("user", "make_payment", {}) == ("You do not have a payment request.", False)


def test_line_state_reaches_the_phone(tau2_data: Path) -> None:
    """Suspending the line cuts service at the next network search (a reboot)."""
    w = _world(tau2_data)
    w.run_function("user", "set_user_info", JOHN)
    w.call("assistant", "suspend_line", {"customer_id": "C1001", "line_id": "L1002", "reason": "x"})
    assert w.user is not None
    assert w.user.db["surroundings"]["line_active"] is False
    text, _ = w.call("user", "reboot_device", {})
    assert (
        text
        == "Restarting network services...\nStatus Bar: 📵 No Signal | 📵 Data Disabled | 🔋 80%"
    )
    assert w.run_function("user", "assert_service_status", {"expected_status": "no_service"})
    w.call("assistant", "resume_line", {"customer_id": "C1001", "line_id": "L1002"})
    w.call("user", "toggle_airplane_mode", {})
    text, _ = w.call("user", "toggle_airplane_mode", {})
    assert text == f"Airplane Mode is now OFF.\n{BAR_5G.replace('📶³ Good', '📶⁴ Excellent')}"


def test_unknown_phone_number_fails_the_sync(tau2_data: Path) -> None:
    w = _world(tau2_data)
    with pytest.raises(ValueError, match="Line with phone number 555-000 not found"):
        w.run_function("user", "set_user_info", {"name": "X", "phone_number": "555-000"})
    assert w.call("user", "check_status_bar", {}) == (
        "Error: Line with phone number 555-000 not found",
        True,
    )
