"""The `synthetic` workload kind: generated prompts of given token lengths.

A session is one request (`--turns 1`, the default) or a multi-turn conversation: each turn
sends the history so far plus a new user message (or, every `tool_every`-th turn, a tool
result after a tool call added to the previous answer), with an optional system prompt that
every session shares and a think time between turns. Lengths are fixed or drawn per request
(`TokenLengths`); output lengths are enforced with `max_tokens` plus `ignore_eos` and
`min_tokens`. This is the load `vllm bench serve --dataset-name random`, GuideLLM's synthetic
data and vLLM's multi-turn benchmark generate (docs/synthetic.md).

Prompt text is built from common English words that are one token each, with a leading
space, in the approximate tokenizer (`agentload.sim.tokenizer`) and in current BPE
vocabularies. With the served model's tokenizer.json every message is checked (and trimmed)
to the exact length; without one the lengths are estimates, except on the embedded simulator
that counts with the same approximation. Text is drawn from an rng seeded by the run's seed,
its load point (concurrency or rate) and the request, so a run is reproducible, no two
requests share a start, and no sweep point reuses another's prompts (no prefix-cache hits
unless a shared prefix is asked for). Lengths depend on the seed and the request only.

The plan has one unit, `synthetic`; a request's trial index is its number (warmup requests
count down from -1), so `--num-episodes`, `--duration` and `--resume` work as for the other
kinds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentload.client import ChatClient, EndpointConfig
from agentload.config import ConfigError, RunConfig, SyntheticConfig
from agentload.results.records import SyntheticSessionLine
from agentload.scheduler import EpisodePlan, WorkItem
from agentload.sim.tokenizer import split_pieces
from agentload.wire import SESSION_HEADER
from agentload.workloads.base import SessionOutcome, Workload
from agentload.workloads.episode import episode_seed

log = logging.getLogger("agentload.synthetic")

UNIT = "synthetic"
DEFAULT_REQUESTS = 100
TOOL_NAME = "lookup"
NOT_GRADED = "does not apply: synthetic requests have no task to succeed at"

_now_ns = time.perf_counter_ns

# Common words of at most seven lowercase letters: one piece each for the approximate
# tokenizer, and one token each (with a leading space) in most BPE vocabularies; a real
# tokenizer keeps only the words that are one token for it.
_WORD_TEXT = """
    the of and to in is for on that with as it by at from this be are or was an not have
    but all can has more one new will about also time which other their there up out if
    than some these only when into its use first two may any most over after such where
    between used many each made under number well part both well through year long high
    work system state world school group order place house point water three great small
    power area city hand word case line end name show since set market form still during
    service public data life level light model road local value family class report field
    early book note paper center story price field money night music study river market
    table window garden letter animal summer winter spring autumn yellow purple orange
    silver golden simple common recent modern ancient quick gentle bright narrow heavy
    travel signal engine bridge stone cloud forest island valley desert ocean planet
    coffee bread butter apple lemon pepper salt sugar honey cheese olive grape melon
    doctor driver farmer pilot singer writer artist teacher worker player member leader
    morning evening minute second moment season century history future method reason
    result effect answer problem process product project program picture figure
    """
WORDS = tuple(dict.fromkeys(w for w in _WORD_TEXT.split() if len(w) <= 7))


class _Tokenizer:
    """A tokenizer.json through the `tokenizers` package: exact token counts."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(
                f"--tokenizer {path}: needs the 'tokenizers' package: "
                "pip install 'agentload[tokenizer]'"
            ) from None
        try:
            self.tok = Tokenizer.from_file(path)
        except Exception as e:  # the Rust side raises its own exception type
            reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise ConfigError(f"--tokenizer {path}: not a tokenizer.json ({reason})") from None

    def ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids), skip_special_tokens=False))


class TextMaker:
    """Message text of an exact token count (exact under `tokenizer`, or under the
    approximate counter when there is none)."""

    def __init__(self, tokenizer: str | None = None) -> None:
        self.tok = _Tokenizer(tokenizer) if tokenizer else None
        words: Sequence[str] = WORDS
        if self.tok is not None:
            # Words that are one token both at the start and after a space.
            tok = self.tok
            words = [w for w in WORDS if tok.count(w) == 1 and tok.count(" " + w) == 1]
            if len(words) < 32:
                raise ConfigError(
                    f"--tokenizer {tokenizer}: too few plain English words are one token in "
                    "this vocabulary to build prompts of exact lengths"
                )
        self.words = tuple(words)

    @property
    def exact(self) -> bool:
        return self.tok is not None

    def count(self, text: str) -> int:
        if self.tok is not None:
            return self.tok.count(text)

        return len(split_pieces(text))

    def text(self, n: int, rng: random.Random) -> str:
        """`n` tokens of words drawn with `rng` (empty for 0)."""
        if n <= 0:
            return ""
        text = " ".join(rng.choices(self.words, k=n))
        tok = self.tok
        if tok is None:
            return text
        ids = tok.ids(text)
        if len(ids) == n:
            return text
        # A vocabulary that merges across spaces: cut the token ids and check again.
        for _ in range(4):
            ids = ids[:n] if len(ids) >= n else ids + tok.ids(" " + self.text(n - len(ids), rng))
            text = tok.decode(ids)
            ids = tok.ids(text)
            if len(ids) == n:
                break
        return text


@dataclass(frozen=True)
class Turn:
    """One turn of a session as drawn: the new message's tokens, the answer's max_tokens,
    and whether the message is a tool result."""

    input_tokens: int
    output_tokens: int
    tool_result: bool


def session_rng(seed: int, trial: int, what: str) -> random.Random:
    digest = hashlib.sha256(f"agentload/synthetic/{seed}/{trial}/{what}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_turns(sc: SyntheticConfig, seed: int, trial: int) -> list[Turn]:
    """The turns of request (session) `trial`: deterministic for the seed."""
    rng = session_rng(seed, trial, "lengths")
    n = sc.turns.draw(rng)
    out = []
    for i in range(n):
        tool = sc.tool_result_tokens is not None and i > 0 and i % sc.tool_every == 0
        lengths = sc.tool_result_tokens if tool and sc.tool_result_tokens else sc.input_tokens
        out.append(Turn(lengths.draw(rng), max(1, sc.output_tokens.draw(rng)), tool))
    return out


class SyntheticWorkload(Workload):
    """Generated requests or multi-turn sessions of given token lengths."""

    kind = "synthetic"
    noun = "requests"
    graded = False
    roles = ("agent",)

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.sc = cfg.synthetic
        if self.sc.multi_turn:
            self.noun = "sessions"  # type: ignore[misc]  # a per-run noun
        self.text = TextMaker(self.sc.tokenizer)  # a bad tokenizer fails here, before the run
        self.lengths = self._lengths()
        self._system: str | None = None
        ld = cfg.load
        # Each load point of a sweep gets prompts of its own (the same lengths): a point
        # must not find the previous point's prompts in the server's prefix cache.
        point = f"rate {ld.rate:g}" if ld.rate is not None else f"c {ld.effective_concurrency}"
        self.text_salt = f"text/{point}"

    def _lengths(self) -> str:
        """exact | estimated: whether the generated messages have the asked token counts as
        the server counts them."""
        if self.text.exact:
            return "exact"
        # The embedded simulator counts with the approximation the text is built for.
        sim_tok = self.cfg.sim.options.get("tokenizer")
        return "exact" if self.cfg.embedded and not sim_tok else "estimated"

    def units(self) -> list[str]:
        return [UNIT]

    def trials(self) -> int:
        return self.sc.num_requests or DEFAULT_REQUESTS

    def plan(self, finished: set[tuple[str, int]]) -> EpisodePlan:

        ld = self.cfg.load
        count = ld.num_episodes if ld.num_episodes is not None else self.sc.num_requests
        return EpisodePlan(
            self.units(),
            trials=self.trials(),
            num_episodes=count,
            unbounded=count is None and ld.duration_s is not None,
            seed=self.cfg.workload.seed,
            warmup_episodes=ld.warmup.episodes,
            warmup_seconds=ld.warmup.seconds,
            finished=finished,
        )

    def describe(self) -> str:
        """One line: what the requests are."""
        sc = self.sc
        parts = [
            f"{self.noun}: input {sc.input_tokens.describe()} tokens, "
            f"output {sc.output_tokens.describe()} tokens"
            + (" (ignore_eos, min_tokens)" if sc.ignore_eos else " (max_tokens only)"),
        ]
        if sc.multi_turn:
            parts.append(f"turns {sc.turns.describe()}")
            if sc.think_time_s:
                parts.append(f"think time {sc.think_time_s:g}s")
            if sc.tool_result_tokens is not None:
                parts.append(
                    f"tool results {sc.tool_result_tokens.describe()} tokens every "
                    f"{sc.tool_every} turns"
                )
        if sc.shared_prefix_tokens:
            parts.append(f"shared system prefix {sc.shared_prefix_tokens} tokens")
        how = (
            f"tokenizer {Path(sc.tokenizer).name}"
            if sc.tokenizer
            else "the simulator's approximate tokenizer"
            if self.lengths == "exact"
            else "~4 characters a token; give --tokenizer for exact lengths"
        )
        parts.append(f"lengths {self.lengths} ({how})")
        parts.append(f"task success {NOT_GRADED}")
        return "; ".join(parts)

    def max_tokens_by_role(self) -> dict[str, Any] | None:
        return {"agent": f"each request's output length ({self.sc.output_tokens.describe()})"}

    def context_block(self) -> dict[str, Any]:
        facts = self._facts()
        facts.pop("description", None)
        return {"kind": self.kind, **facts}

    def metadata(self) -> dict[str, Any]:
        if self.lengths == "estimated":
            # Once per run: metadata is read when the results folder is opened.
            log.warning(
                "synthetic prompt lengths are estimated (~4 characters a token); give "
                "--tokenizer with the served model's tokenizer.json for exact lengths"
            )
        return {"synthetic": self._facts()}

    def _facts(self) -> dict[str, Any]:
        """What the requests are, for run.json and the report's context."""
        sc = self.sc
        return {
            "input_tokens": sc.input_tokens.describe(),
            "output_tokens": sc.output_tokens.describe(),
            "turns": sc.turns.describe(),
            "shared_prefix_tokens": sc.shared_prefix_tokens,
            "think_time_s": sc.think_time_s,
            "tool_result_tokens": (
                sc.tool_result_tokens.describe() if sc.tool_result_tokens else None
            ),
            "tool_every": sc.tool_every if sc.tool_result_tokens else None,
            "ignore_eos": sc.ignore_eos,
            "lengths": self.lengths,
            "tokenizer": Path(sc.tokenizer).name if sc.tokenizer else None,
            "task_success": NOT_GRADED,
            "description": self.describe(),
        }

    async def prepare(self, endpoints: Mapping[str, EndpointConfig], *, embedded: bool) -> None:
        self._system = self.system_prompt()

    def system_prompt(self) -> str | None:
        """The shared system prompt (the same in every session of a seed), or None."""
        n = self.sc.shared_prefix_tokens
        if not n:
            return None
        return self.text.text(n, session_rng(self.cfg.workload.seed, 0, "shared-prefix"))

    def request_seed(self, trial: int) -> int | None:
        rs = self.cfg.workload.request_seed
        if rs == "none":
            return None
        if rs == "episode":
            return episode_seed(self.cfg.workload.seed, UNIT, trial)
        return int(rs)

    async def run_session(
        self, item: WorkItem, session_id: str, clients: Mapping[str, ChatClient]
    ) -> SessionOutcome:
        if self._system is None and self.sc.shared_prefix_tokens:
            self._system = self.system_prompt()
        return await _Session(self, item.trial, session_id, clients["agent"]).run()


class _Session:
    """One request, or one multi-turn session."""

    def __init__(self, w: SyntheticWorkload, trial: int, sid: str, client: ChatClient) -> None:
        self.w, self.trial, self.sid, self.client = w, trial, sid, client
        seed = w.cfg.workload.seed
        self.turns = draw_turns(w.sc, seed, trial)
        self.rng = session_rng(seed, trial, w.text_salt)
        self.history: list[dict[str, Any]] = []
        self.done: list[dict[str, Any]] = []

    async def run(self) -> SessionOutcome:
        w = self.w
        started_at, start_ns = time.time(), _now_ns()
        if w._system is not None:
            self.history.append({"role": "system", "content": w._system})
        try:
            termination, error, llm_s, think_s, failed = await self._turns()
        except Exception as e:  # a bug must not take the other sessions down
            log.exception("synthetic session %s failed", self.sid)
            termination, error = "infra_error", f"internal error: {type(e).__name__}: {e}"
            llm_s = think_s = 0.0
            failed = 0
        end_ns = _now_ns()
        session = SyntheticSessionLine(
            kind="synthetic",
            session_id=self.sid,
            task_id=UNIT,
            trial=self.trial,
            termination=termination,
            error=error,
            counts={
                "agent_calls": len(self.done),
                "failed_calls": failed,
                "turns": len(self.turns),
                "turns_sent": len(self.done),
                "tool_turns": sum(1 for d in self.done if d["tool_result"]),
            },
            durations={"total_s": (end_ns - start_ns) / 1e9, "llm_s": llm_s, "delay_s": think_s},
            started_at=started_at,
            start_ns=start_ns,
            end_ns=end_ns,
            synthetic={"lengths": w.lengths, "turns": self.done},
        )
        # No trajectory: the prompts are generated and reproducible from the seed, and
        # writing them would cost the client more than the requests do.
        return SessionOutcome(session)

    async def _turns(self) -> tuple[str, str | None, float, float, int]:
        """Send the turns; (termination, error, seconds in calls, think time, failed calls)."""
        w, sc = self.w, self.w.sc
        termination, error = "completed", None
        llm_s = think_s = 0.0
        failed = 0
        extra = None
        seed = w.request_seed(self.trial)
        for i, t in enumerate(self.turns):
            if i and sc.think_time_s:
                await asyncio.sleep(sc.think_time_s)
                think_s += sc.think_time_s
            self._add_message(i, t)
            if sc.ignore_eos:
                extra = {"ignore_eos": True, "min_tokens": t.output_tokens}
            res = await self.client.chat(
                self.history,
                max_tokens=t.output_tokens,
                temperature=w.cfg.workload.temperature,
                seed=seed,
                extra_body=extra,
                headers={SESSION_HEADER: self.sid},
                session_id=self.sid,
                role="agent",
                turn=i,
                call_id=f"{self.sid}:{i}",
            )
            rec = res.record
            llm_s += rec.total_s
            self.done.append(
                {
                    "turn": i,
                    "input_tokens": t.input_tokens,
                    "output_tokens": t.output_tokens,
                    "tool_result": t.tool_result,
                    "prompt_tokens": rec.prompt_tokens,
                    "completion_tokens": rec.completion_tokens,
                }
            )
            if not rec.ok:
                failed += 1
                kind = rec.error_kind or "error"
                termination = "context_overflow" if kind == "context_overflow" else "infra_error"
                detail = f": {rec.error_message}" if rec.error_message else ""
                error = f"turn {i}: {kind}{detail}"
                break
            self.history.append({"role": "assistant", "content": res.content or ""})
        return termination, error, llm_s, think_s, failed

    def _add_message(self, i: int, t: Turn) -> None:
        text = self.w.text.text(t.input_tokens, self.rng)
        if not t.tool_result:
            self.history.append({"role": "user", "content": text})
            return
        # A tool result answers a tool call: the previous answer makes one.
        call_id = f"call_{self.trial}_{i}"
        prev = self.history[-1]
        prev["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": "{}"},
            }
        ]
        self.history.append({"role": "tool", "tool_call_id": call_id, "content": text})
