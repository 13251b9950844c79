"""The domain framework on a tiny purpose-built domain: environment, grading, pass^k, registry."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from agentload.domains import domain_names, get_domain, get_task
from agentload.domains.base import (
    GRADER_VERSION,
    Action,
    Domain,
    Environment,
    Task,
    Tool,
    ToolError,
    UserScenario,
    grade,
    hash_db,
    missing_outputs,
    normalize_text,
    pass_hat_k,
)


def _deposit(db: dict, account: str, amount: int) -> dict:
    if account not in db["accounts"]:
        raise ToolError(f"no account {account}")
    db["accounts"][account] += amount
    return {"account": account, "balance": db["accounts"][account]}


def _balance(db: dict, account: str) -> str:
    return f"{db['accounts'][account]}"  # KeyError on purpose for unknown accounts


def _odd(db: dict) -> object:
    return {1, 2}  # not JSON


_ACCOUNT = {"type": "string"}
TOOLS = [
    Tool(
        "deposit",
        "Add money.",
        {
            "type": "object",
            "properties": {"account": _ACCOUNT, "amount": {"type": "integer", "minimum": 1}},
            "required": ["account", "amount"],
            "additionalProperties": False,
        },
        True,
        _deposit,
    ),
    Tool(
        "balance",
        "Read a balance.",
        {
            "type": "object",
            "properties": {"account": _ACCOUNT},
            "required": ["account"],
            "additionalProperties": False,
        },
        False,
        _balance,
    ),
    Tool("odd", "Returns a set.", {"type": "object", "properties": {}}, False, _odd),
]


class Bank(Domain):
    name = "bank"
    data_version = "bank-1"
    policy = "Be nice."

    def __init__(self) -> None:
        self.tools = TOOLS
        self.made = 0

    def make_db(self, seed: int = 0) -> dict:
        self.made += 1
        return {"accounts": {"a": 10 + seed, "b": 5}}

    def tasks(self) -> list[Task]:
        scen = UserScenario("terse", "You want to deposit 5 into a.", {"account": "a"}, [], "Hi")
        return [
            Task(
                "bank/000",
                "bank",
                "single_write",
                scen,
                (
                    Action("balance", {"account": "a"}),
                    Action("deposit", {"account": "a", "amount": 5}),
                ),
                ("balance is 15",),
            )
        ]


@pytest.fixture
def bank() -> Bank:
    return Bank()


def test_tool_schema_is_openai_shape() -> None:
    s = TOOLS[0].schema()
    assert s["type"] == "function"
    assert s["function"]["name"] == "deposit"
    assert s["function"]["parameters"]["additionalProperties"] is False
    assert Bank().tool_schemas()[1]["function"]["name"] == "balance"


def test_execute_ok_records_action_and_mutates(bank: Bank) -> None:
    env = Environment(bank)
    r = env.execute("deposit", '{"account": "a", "amount": 3}')
    assert r.ok and r.content == '{"account":"a","balance":13}'
    assert env.db["accounts"]["a"] == 13
    assert env.actions == [Action("deposit", {"account": "a", "amount": 3})]
    assert env.execute("balance", {"account": "a"}).content == "13"  # strings pass through


@pytest.mark.parametrize(
    ("name", "args", "fragment"),
    [
        ("nope", {}, "unknown tool 'nope'"),
        ("deposit", "{not json", "not valid JSON"),
        ("deposit", "[1, 2]", "must be a JSON object"),
        ("deposit", {"account": "a"}, "'amount' is a required property"),
        ("deposit", {"account": "a", "amount": 0}, "amount: 0 is less than the minimum"),
        ("deposit", {"account": "a", "amount": 1, "x": 1}, "Additional properties"),
        ("deposit", {"account": "zz", "amount": 1}, "no account zz"),
        ("balance", {"account": "zz"}, "KeyError"),
        ("odd", None, "non-JSON result"),
    ],
)
def test_execute_never_raises(bank: Bank, name: str, args: object, fragment: str) -> None:
    env = Environment(bank)
    before = env.db_hash()
    r = env.execute(name, args)  # type: ignore[arg-type]
    assert not r.ok
    assert r.content.startswith("Error: ")
    assert fragment in r.content
    assert env.db_hash() == before


def test_malformed_calls_are_not_recorded_but_tool_errors_are(bank: Bank) -> None:
    env = Environment(bank)
    env.execute("nope", {})
    env.execute("deposit", "{bad")
    env.execute("deposit", {"account": "zz", "amount": 1})
    assert env.actions == [Action("deposit", {"account": "zz", "amount": 1})]


def test_fresh_db_is_private_and_cached(bank: Bank) -> None:
    e1, e2 = Environment(bank), Environment(bank)
    e1.execute("deposit", {"account": "a", "amount": 1})
    assert e2.db["accounts"]["a"] == 10
    assert bank.made == 1
    assert Environment(bank, seed=3).db["accounts"]["a"] == 13
    assert bank.made == 2


def test_hash_is_key_order_independent_and_stable_across_processes() -> None:
    db = {"b": [1, {"y": 2, "x": "é"}], "a": None}
    same = {"a": None, "b": [1, {"x": "é", "y": 2}]}
    assert hash_db(db) == hash_db(same)
    code = (
        "from agentload.domains.base import hash_db;"
        "print(hash_db({'b': [1, {'y': 2, 'x': 'é'}], 'a': None}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert out.stdout.strip() == hash_db(db)


def test_grade_rewards_gold_and_checks_outputs(bank: Bank) -> None:
    task = bank.tasks()[0]
    gold = list(task.gold_actions)
    g = grade(bank, task, gold, ["Done: your balance is 15."])
    assert (g.reward, g.db_match, g.outputs_ok) == (1.0, True, True)
    assert g.grader_version == GRADER_VERSION and g.data_version == "bank-1"
    assert g.db_hash == g.gold_hash

    no_output = grade(bank, task, gold, ["Done."])
    assert (
        no_output.reward == 0.0
        and no_output.db_match
        and no_output.missing_outputs == ["balance is 15"]
    )

    wrong = grade(bank, task, [Action("deposit", {"account": "a", "amount": 6})], ["balance is 15"])
    assert wrong.reward == 0.0 and not wrong.db_match and wrong.outputs_ok

    # Reads and failed calls do not change the outcome.
    noisy = [Action("balance", {"account": "b"}), Action("deposit", {"account": "q", "amount": 1})]
    assert grade(bank, task, noisy + gold, ["balance is 15"]).reward == 1.0
    assert grade(bank, task, gold, ["balance is 15"]).to_dict()["reward"] == 1.0


def test_output_normalisation() -> None:
    assert (
        normalize_text("Total: $1,234.50  for  BASIC_ECONOMY")
        == "total: $1234.50 for basic economy"
    )
    assert missing_outputs(
        ["1234", "Basic Economy", "xyz"], ["It costs $1,234", "basic_economy"]
    ) == ["xyz"]
    assert missing_outputs([], []) == []
    # A comma that is not a thousands separator stays.
    assert normalize_text("1,2") == "1,2"
    assert missing_outputs(["24 hour"], ["booked within the last 24-hour window"]) == []


def test_pass_hat_k_matches_definition() -> None:
    res = pass_hat_k({"t1": [True, True, False, True], "t2": [False] * 4, "t3": [True] * 4})
    for k in range(1, 5):
        expect = (math.comb(3, k) / math.comb(4, k) + 0 + 1) / 3
        assert res[k] == pytest.approx(expect)
    assert list(res) == [1, 2, 3, 4]
    assert res[1] == pytest.approx(7 / 12)
    # k runs to the smallest trial count; tasks without trials are ignored.
    assert list(pass_hat_k({"a": [True, True, True], "b": [True], "c": []})) == [1]
    assert pass_hat_k({}) == {}
    # pass^k never increases with k
    r = pass_hat_k({"a": [True, False, True, True, False]})
    assert all(r[k] >= r[k + 1] for k in range(1, 5))


def test_registry() -> None:
    assert {"airline", "retail"} <= set(domain_names())
    assert get_domain("airline") is get_domain("airline")
    assert get_task("airline/000").id == "airline/000"
    with pytest.raises(KeyError, match="unknown domain"):
        get_domain("nope")
    with pytest.raises(KeyError, match="not of the form"):
        get_task("airline")
    with pytest.raises(KeyError, match="unknown task"):
        get_task("airline/999")


def test_db_cache_is_bounded(bank: Bank) -> None:
    from agentload.domains.base import DB_CACHE_SEEDS

    for seed in range(DB_CACHE_SEEDS + 3):
        Environment(bank, seed)
    Environment(bank, DB_CACHE_SEEDS + 2)  # recent: cached
    assert bank.made == DB_CACHE_SEEDS + 3
    Environment(bank, 0)  # evicted long ago: regenerated
    assert bank.made == DB_CACHE_SEEDS + 4
    assert len(bank.__dict__["_db_cache"]) == DB_CACHE_SEEDS


def test_tools_cannot_alias_recorded_or_gold_arguments(bank: Bank) -> None:
    def keep(db: dict, items: list) -> str:
        db["kept"] = items
        items.append("changed later")
        return "ok"

    schema = {"type": "object", "properties": {"items": {"type": "array"}}}
    bank.tools = [*TOOLS, Tool("keep", "Keeps its argument.", schema, True, keep)]
    env = Environment(bank)
    args = {"items": ["a"]}
    assert env.execute("keep", args).ok
    assert args == {"items": ["a"]}
    assert env.actions[-1].arguments == {"items": ["a"]}
    assert env.db["kept"] == ["a", "changed later"]


def test_evaluate_arithmetic() -> None:
    from agentload.domains.base import evaluate_arithmetic

    assert evaluate_arithmetic(" (320 + 185) * 2 - -50 / 4") == 1022.5
    for bad in ("__import__('os')", "2 ** 10", "1 / 0", "abc", "1 +", "9" * 201):
        with pytest.raises(ToolError):
            evaluate_arithmetic(bad)
