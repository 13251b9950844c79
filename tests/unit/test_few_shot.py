"""The few-shot agent: its examples file (format, errors) and its system prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentload.agents import make_agent
from agentload.agents.strategies import (
    FEW_SHOT_EXAMPLES,
    FEW_SHOT_MISSING,
    FewShotAgent,
    FewShotError,
    few_shot_agent,
    few_shot_system_prompt,
    load_few_shot,
    use_few_shot_file,
)
from agentload.domains import get_domain
from agentload.workloads import EpisodeOptions

DISPLAY = "user: Is SK1 on time?\nassistant: None\ntool: on time\nassistant: It is on time."


@pytest.fixture(autouse=True)
def no_examples_file() -> Iterator[None]:
    """The examples file is a setting of the process: each test starts and ends without one."""
    use_few_shot_file(None)
    yield
    use_few_shot_file(None)


def write(tmp_path: Path, *lines: str, name: str = "shots.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


def test_tau_bench_lines_and_message_lists(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "the policy (left out)"},
        {"role": "user", "content": "Cancel ABC123."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "cancel", "arguments": '{"id": "ABC123"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "cancelled"},
        {"role": "assistant", "content": "Done."},
    ]
    path = write(
        tmp_path,
        json.dumps({"messages_display": DISPLAY}),
        "",
        # a line of an agentload trajectories.jsonl: other keys are ignored
        json.dumps({"schema": "agentload.trajectory/1", "reward": 1.0, "messages": messages}),
    )
    assert load_few_shot(path) == (
        DISPLAY,
        'user: Cancel ABC123.\nassistant (tool call): cancel {"id": "ABC123"}\n'
        "tool: cancelled\nassistant: Done.",
    )


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (['{"messages_display": "a"}', "{not json"], ", line 2: not valid JSON"),
        (["", '{"text": "a"}'], ', line 2: expected a JSON object with a "messages_display"'),
        (['["user: hi"]'], ", line 1: expected a JSON object"),
        (['{"messages_display": ""}'], ", line 1: expected a JSON object"),
        (['{"messages": [{"content": "hi"}]}'], ', line 1: "messages" item 1 is not a message'),
        (['{"messages": [{"role": "system", "content": "x"}]}'], "holds no conversation"),
        (["", "  "], ": no examples (one JSON object a line)"),
    ],
)
def test_a_bad_file_names_the_file_and_line(tmp_path: Path, lines: list[str], error: str) -> None:
    path = write(tmp_path, *lines)
    with pytest.raises(FewShotError) as e:
        load_few_shot(path)
    assert str(e.value).startswith(f"few-shot file {path}")
    assert error in str(e.value)


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(FewShotError, match=r"few-shot file .*nope\.jsonl: cannot read it"):
        load_few_shot(tmp_path / "nope.jsonl")
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"messages_display": "caf\xe9"}\n')
    with pytest.raises(FewShotError, match="not UTF-8 text"):
        load_few_shot(bad)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"messages_display": "first"}))
    assert load_few_shot(path) == ("first",)
    path.write_text(json.dumps({"messages_display": "second, longer"}) + "\n")
    assert load_few_shot(path) == ("second, longer",)


def test_the_prompt_shows_five_examples_chosen_per_task() -> None:
    few = few_shot_system_prompt("POLICY\n", ["a", "b"], "airline/000")
    assert few == "POLICY\n\nExample 1:\na\n\nExample 2:\nb"
    many = [f"example number {i}" for i in range(20)]
    p0 = few_shot_system_prompt("POLICY", many, "airline/000")
    assert p0.count("Example ") == FEW_SHOT_EXAMPLES == 5
    assert p0 == few_shot_system_prompt("POLICY", many, "airline/000")  # repeatable
    others = {few_shot_system_prompt("POLICY", many, f"airline/{i:03d}") for i in range(1, 6)}
    assert len(others | {p0}) > 1  # another task draws other examples


def test_the_agent_is_tool_calling_with_the_examples(tmp_path: Path) -> None:
    domain = get_domain("airline")
    task = domain.tasks()[0]
    with pytest.raises(ValueError) as e:
        make_agent("few-shot", domain, task)
    assert str(e.value) == FEW_SHOT_MISSING
    assert "workload.few_shot" in FEW_SHOT_MISSING and "--few-shot" in FEW_SHOT_MISSING

    path = write(tmp_path, json.dumps({"messages_display": DISPLAY}))
    use_few_shot_file(path)
    agent = make_agent("few-shot", domain, task, keep_reasoning=True)
    assert isinstance(agent, FewShotAgent) and agent.name == "few-shot"
    assert agent.tools and getattr(agent, "action_format", "native") == "native"
    system = agent.messages[0]["content"]
    assert system == f"{domain.system_prompt().rstrip()}\n\nExample 1:\n{DISPLAY}"
    assert agent.keep_reasoning


def test_episode_options_set_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"messages_display": DISPLAY}))
    EpisodeOptions(agent="few-shot", few_shot=str(path))
    assert few_shot_agent.examples_file == str(path)
    EpisodeOptions()  # options without a file leave the setting alone
    assert few_shot_agent.examples_file == str(path)
    bad = write(tmp_path, "{", name="bad.jsonl")
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 1: not valid JSON"):
        EpisodeOptions(agent="few-shot", few_shot=str(bad))
    assert few_shot_agent.examples_file == str(path)  # a bad file changes nothing
