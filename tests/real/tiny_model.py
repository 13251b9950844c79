"""Build a tiny chat model for the real-engine tests: nothing comes from a model hub.

    python tiny_model.py OUT_DIR [--corpus FILE ...] [--positions 16384]

A Qwen2-architecture causal LM with random weights (a few million parameters), a byte-level
BPE tokenizer trained here on generated text (plus any --corpus files), and a ChatML chat
template that renders tools and tool calls the way vLLM's hermes parser reads them back
(`<tool_call>{"name": ..., "arguments": ...}</tool_call>`). Its output is noise; it never stops
on its own and calls a tool only when the test forces its text (structured outputs).

Needs numpy, tokenizers and safetensors (all present where vLLM is installed). The build is
deterministic: the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

# Markers of the chat format. <tool_call> tags must be single vocabulary entries that are not
# "special" (special tokens are dropped from the detokenized text the parser reads).
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
VOCAB_SIZE = 8192

# GPT-2/Qwen2-style split: contractions, letter runs, single digits, punctuation, spaces.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='') -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set ns.system = messages[0].content -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "<|im_start|>system\n"
    "{%- if ns.system %}{{ ns.system }}\n\n{% endif -%}"
    "You can call these functions. The signatures are inside <tools></tools>:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    "To call one, answer with a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <name>, "arguments": <JSON object>}\n</tool_call><|im_end|>\n'
    "{%- elif ns.system -%}"
    "<|im_start|>system\n{{ ns.system }}<|im_end|>\n"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' and loop.first -%}"
    "{%- elif m.role == 'tool' -%}"
    "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- elif m.role == 'assistant' -%}"
    "<|im_start|>assistant\n{{ m.content or '' }}"
    "{%- for tc in (m.tool_calls or []) -%}"
    "{%- set args = tc.function.arguments -%}"
    '\n<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": '
    "{{ args | tojson if args is mapping else args }}}\n</tool_call>"
    "{%- endfor -%}"
    "<|im_end|>\n"
    "{%- else -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)

_WORD_TEXT = (
    "the a an and or but if then else when while for to of in on at by with from as is are "
    "was were be been has have had do does did can could will would should may might must "
    "I you he she it we they me him her us them my your his its our their this that these "
    "those what which who whom whose where why how all any both each few more most other some "
    "such no not only own same so than too very just now customer agent user assistant system "
    "booking reservation flight order item return exchange refund payment card gift balance "
    "address city date time seat cabin economy business first passenger baggage policy "
    "cancel change update confirm please thank hello help need want would like number "
    "id name email phone account status pending delivered shipped processed price total "
    "tool call function arguments result error message content role json true false null"
)
_WORDS = _WORD_TEXT.split()


def corpus(extra: list[Path], seed: int = 0) -> Iterator[str]:
    """Generated chat-like lines, JSON and tool-call text; then the extra files' lines."""
    rng = random.Random(seed)
    for _ in range(30_000):
        n = rng.randint(4, 24)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randrange(n), str(rng.randint(0, 99_999)))
        line = " ".join(words).capitalize() + rng.choice([".", "?", "!", ":", ","])
        yield line
        if rng.random() < 0.2:
            args = {rng.choice(_WORDS): rng.choice(_WORDS) for _ in range(rng.randint(1, 3))}
            call = {"name": f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}", "arguments": args}
            yield f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    for path in extra:
        yield from path.read_text(encoding="utf-8").splitlines()


def build_tokenizer(extra: list[Path]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern=_regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(extra), trainer=trainer)
    from tokenizers import AddedToken

    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TAGS])
    return tok


def _regex(pattern: str) -> object:
    from tokenizers import Regex

    return Regex(pattern)


def build_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv, v = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    hd = h // heads

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    out = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": np.ones(h, np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out |= {
            f"{p}.input_layernorm.weight": np.ones(h, np.float32),
            f"{p}.post_attention_layernorm.weight": np.ones(h, np.float32),
            f"{p}.self_attn.q_proj.weight": w(heads * hd, h),
            f"{p}.self_attn.q_proj.bias": w(heads * hd),
            f"{p}.self_attn.k_proj.weight": w(kv * hd, h),
            f"{p}.self_attn.k_proj.bias": w(kv * hd),
            f"{p}.self_attn.v_proj.weight": w(kv * hd, h),
            f"{p}.self_attn.v_proj.bias": w(kv * hd),
            f"{p}.self_attn.o_proj.weight": w(h, heads * hd),
            f"{p}.mlp.gate_proj.weight": w(inter, h),
            f"{p}.mlp.up_proj.weight": w(inter, h),
            f"{p}.mlp.down_proj.weight": w(h, inter),
        }
    return out


def build(out: Path, *, corpus_files: list[Path], positions: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(corpus_files)
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL + TOOL_TAGS}
    assert all(i is not None for i in ids.values()), ids
    vocab = -(-tok.get_vocab_size() // 64) * 64  # rounded up, as real models pad it
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        # head_dim 64: vLLM's CPU attention has no kernel for very small heads (16 fails).
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": positions,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_sliding_window": False,
        "vocab_size": vocab,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]})
    )
    added = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL,
        }
        for t, i in ids.items()
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": positions,
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "added_tokens_decoder": added,
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
    )
    save_file(build_weights(cfg), str(out / "model.safetensors"), metadata={"format": "pt"})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--corpus", type=Path, action="append", default=[])
    p.add_argument("--positions", type=int, default=16384)
    a = p.parse_args()
    build(a.out, corpus_files=a.corpus, positions=a.positions)
    print(f"tiny model written to {a.out}")


if __name__ == "__main__":
    main()
