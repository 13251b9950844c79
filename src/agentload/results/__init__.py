"""The results directory of a run: append-only recorder, JSONL helpers and the summary."""

from agentload.results.jsonl import JsonlError, load_jsonl
from agentload.results.recorder import Recorder, redact
from agentload.results.summary import SUMMARY_SCHEMA, parse_slo, summarize, write_summary

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
