"""The synthetic kind's lengths and text: the length syntax, exact token counts with and
without a tokenizer, determinism from the seed, and the turns of a multi-turn session."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentload.config import ConfigError, SyntheticConfig, TokenLengths, build_config
from agentload.sim.tokenizer import split_pieces
from agentload.workloads.synthetic import WORDS, TextMaker, draw_turns, session_rng


def test_length_syntax() -> None:
    assert TokenLengths.model_validate("512").describe() == "512"
    assert TokenLengths.model_validate(64).value == 64
    u = TokenLengths.model_validate("uniform:256-768")
    assert (u.dist, u.low, u.high) == ("uniform", 256, 768)
    n = TokenLengths.model_validate("normal:512,64")
    assert (n.dist, n.mean, n.sd) == ("normal", 512.0, 64.0)
    rng = random.Random(1)
    draws = [u.draw(rng) for _ in range(2000)]
    assert min(draws) >= 256 and max(draws) <= 768
    assert 480 < sum(draws) / len(draws) < 544  # mean 512
    normal = [n.draw(rng) for _ in range(2000)]
    assert 505 < sum(normal) / len(normal) < 519


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--input-tokens", "uniform:9-3", "low end is above the high end"),
        ("--output-tokens", "lots", "expected a token length"),
        ("--turns", "0", "turns per session run from 1"),
        ("--think-time", "soon", "expected a duration"),
    ],
)
def test_bad_values_name_their_flag(flag: str, value: str, words: str) -> None:
    path = {
        "--input-tokens": "synthetic.input_tokens",
        "--output-tokens": "synthetic.output_tokens",
        "--turns": "synthetic.turns",
        "--think-time": "synthetic.think_time_s",
    }[flag]
    with pytest.raises(ConfigError) as e:
        build_config(data={"kind": "synthetic"}, overrides={path: value}, flags={path: flag})
    msg = str(e.value)
    assert flag in msg and words in msg and "\n" not in msg.strip()


def test_text_is_exact_under_the_approximation() -> None:
    maker = TextMaker()
    assert not maker.exact
    rng = random.Random(7)
    for n in (1, 2, 16, 512, 3000):
        text = maker.text(n, rng)
        assert len(split_pieces(text)) == n
    assert maker.text(0, rng) == ""


def write_tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json: each of agentload's prompt words (and a few others) is
    one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for w in (*WORDS, "hello", "world"):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def test_text_is_exact_with_a_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = write_tokenizer(tmp_path / "tokenizer.json")
    maker = TextMaker(str(path))
    assert maker.exact
    tok = Tokenizer.from_file(str(path))
    rng = random.Random(3)
    for n in (1, 100, 777):
        text = maker.text(n, rng)
        assert len(tok.encode(text, add_special_tokens=False).ids) == n


def test_a_bad_tokenizer_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError) as e:
        TextMaker(str(bad))
    assert str(e.value).startswith(f"--tokenizer {bad}: not a tokenizer.json")
    with pytest.raises(ConfigError) as e2:
        build_config(
            data={"kind": "synthetic"},
            overrides={"synthetic.tokenizer": str(tmp_path / "missing.json")},
            flags={"synthetic.tokenizer": "--tokenizer"},
        )
    assert "--tokenizer" in str(e2.value) and "no such file" in str(e2.value)


def test_prompts_are_deterministic_and_distinct() -> None:
    maker = TextMaker()
    a = maker.text(64, session_rng(0, 5, "text"))
    assert a == maker.text(64, session_rng(0, 5, "text"))  # same seed and request
    others = {maker.text(64, session_rng(0, t, "text"))[:40] for t in range(200)}
    assert len(others) == 200  # no two requests share a start
    assert maker.text(64, session_rng(1, 5, "text")) != a  # another seed, other prompts


def test_multi_turn_shape() -> None:
    sc = SyntheticConfig.model_validate(
        {
            "turns": "uniform:3-6",
            "input_tokens": "uniform:50-100",
            "output_tokens": 20,
            "tool_result_tokens": 300,
            "tool_every": 2,
        }
    )
    assert sc.multi_turn
    seen = set()
    for trial in range(50):
        turns = draw_turns(sc, 0, trial)
        assert turns == draw_turns(sc, 0, trial)
        seen.add(len(turns))
        for i, t in enumerate(turns):
            assert t.tool_result == (i > 0 and i % 2 == 0)
            assert t.input_tokens == 300 if t.tool_result else 50 <= t.input_tokens <= 100
            assert t.output_tokens == 20
    assert seen == {3, 4, 5, 6}
    assert not SyntheticConfig().multi_turn
