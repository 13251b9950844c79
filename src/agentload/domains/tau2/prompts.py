"""What the models of a τ² episode read, worded as τ²-bench words it (v1.0.1), so that an
agentload run loads an engine with τ²'s own prompts and its rewards compare with τ²'s.

The wording of the agent's instructions, the greeting, the stop markers and the judge's
prompt are facts of the benchmark's interface (τ²-bench: src/tau2/agent/llm_agent.py,
orchestrator/orchestrator.py, user/user_simulator_base.py and
evaluator/evaluator_nl_assertions.py); the user simulator's guidelines are τ²'s data files,
read at run time.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from agentload.domains.tau2 import data

GREETING = "Hi! How can I help you today?"
STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
USER_STOP_MARKERS = (STOP, TRANSFER, OUT_OF_SCOPE)

AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> "
    "provided below.\n"
    "In each turn you can either:\n"
    "- Send a message to the user.\n"
    "- Make a tool call.\n"
    "You cannot do both at the same time.\n"
    "\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid "
    "JSON only."
)


def agent_system_prompt(policy: str) -> str:
    """The agent's system message: τ²'s instructions, then the domain policy."""
    return f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"


@cache
def _read(path: Path, mtime: int) -> str:
    return path.read_text(encoding="utf-8")


def guidelines(with_tools: bool) -> str:
    """τ²'s global user-simulator guidelines (the tools variant when the user has tools)."""
    name = data.GUIDELINES[1] if with_tools else data.GUIDELINES[0]
    p = data.guidelines_path(name)
    return _read(p, p.stat().st_mtime_ns)


def user_system_prompt(instructions: str, with_tools: bool) -> str:
    """The user simulator's system message: the guidelines, then the task's scenario."""
    text = guidelines(with_tools).replace("<PERSONA_GUIDELINES>", "")
    return f"{text}\n<scenario>\n{instructions}\n</scenario>"


def is_user_stop(text: str | None) -> bool:
    return bool(text) and any(m in text for m in USER_STOP_MARKERS)  # type: ignore[operator]


# The judge of natural-language assertions (τ²'s evaluator prompt, whitespace included).
JUDGE_SYSTEM_PROMPT = """
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
        
        Example response structure:
        {
            "results": [
                {
                    "expectedOutcome": "<one of the expected outcomes from the input>",
                    "reasoning": "<reasoning trace>",
                    "metExpectation": <false or true>,
                }
            ]
        }
        """  # noqa: E501, W293


def judge_user_prompt(conversation: str, nl_assertions: list[str]) -> str:
    return f"""
        conversation:
        {conversation}
        
        expectedOutcomes:
        {nl_assertions}
        """  # noqa: W293
