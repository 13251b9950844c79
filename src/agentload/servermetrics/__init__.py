"""Prometheus scraping of vLLM / SGLang engines and the server-side figures of a run."""

from agentload.servermetrics.parse import FIELDS, GPU_FIELDS, SAMPLE_SCHEMA, parse_metrics
from agentload.servermetrics.scraper import MetricsScraper, fetch_metrics
from agentload.servermetrics.summary import counter_delta, summarize_gpu, summarize_server

__all__ = [
    "FIELDS",
    "GPU_FIELDS",
    "SAMPLE_SCHEMA",
    "MetricsScraper",
    "counter_delta",
    "fetch_metrics",
    "parse_metrics",
    "summarize_gpu",
    "summarize_server",
]
