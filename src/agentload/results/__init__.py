"""The results directory of a run: append-only recorder, JSONL helpers and the summary."""

from agentload.results.jsonl import JsonlError, load_jsonl
from agentload.results.recorder import Recorder, redact
from agentload.results.summary import SUMMARY_SCHEMA, summarize, write_summary
from agentload.units import parse_slo

__all__ = [
    "SUMMARY_SCHEMA",
    "JsonlError",
    "Recorder",
    "load_jsonl",
    "parse_slo",
    "redact",
    "summarize",
    "write_summary",
]
