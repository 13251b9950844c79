"""The simulator's Prometheus metrics, named, labelled and bucketed as vLLM v1's.

Values live in plain Python numbers (the engine updates them per step without locks) and
are turned into metric families when ``/metrics`` is scraped. Each server has its own
``CollectorRegistry``, so several simulators can run in one process.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

# Bucket boundaries as in vLLM 0.32's exposition (see docs/simulator.md).
TOKEN_BUCKETS = (
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
    20000.0,
)
ITERATION_TOKEN_BUCKETS = (
    1.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    8192.0,
    16384.0,
)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_TIME_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
LAG_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class Hist:
    """A lock-free histogram: bucket counts, sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, value: float, times: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            out.append((repr(float(bound)), float(acc)))
        out.append(("+Inf", float(self.count)))
        return out

    def quantile(self, q: float) -> float:
        """Upper bucket bound holding quantile ``q`` (an upper estimate)."""
        if self.count == 0:
            return 0.0
        target = q * self.count
        acc = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            if acc >= target:
                return bound
        return float("inf")


class FineLag:
    """Emission lag in 50 µs bins up to 1 s: exact-enough percentiles, and the Prometheus
    histogram derived from the same counts. The engine updates ``counts``, ``n``, ``sum`` and
    ``max`` inline; :meth:`mark` starts a measurement window for :meth:`window`."""

    __slots__ = ("_base", "_base_n", "counts", "max", "n", "sum", "window_max")
    STEP = 5e-5
    SCALE = 1 / STEP
    SIZE = 20000

    def __init__(self) -> None:
        self.counts = [0] * (self.SIZE + 1)
        self.n = 0
        self.sum = 0.0
        self.max = 0.0
        self.window_max = 0.0
        self._base = list(self.counts)
        self._base_n = 0

    def add(self, lag: float, times: int = 1) -> None:
        i = int(lag * self.SCALE) if lag > 0 else 0
        self.counts[i if i < self.SIZE else self.SIZE] += times
        self.n += times
        self.sum += lag * times
        if lag > self.max:
            self.max = lag
        if lag > self.window_max:
            self.window_max = lag

    def mark(self) -> None:
        self._base = list(self.counts)
        self._base_n = self.n
        self.window_max = 0.0

    def _quantile(self, counts: list[int], n: int, q: float, top: float) -> float:
        if n <= 0:
            return 0.0
        target = q * n
        acc = 0
        for i, c in enumerate(counts):
            acc += c
            if acc >= target:
                return min((i + 1) * self.STEP, top) if i < self.SIZE else top
        return top

    def quantile(self, q: float) -> float:
        return self._quantile(self.counts, self.n, q, self.max)

    def window(self) -> dict[str, float]:
        """Tokens and lag percentiles since the last :meth:`mark`."""
        counts = [a - b for a, b in zip(self.counts, self._base, strict=True)]
        n = self.n - self._base_n
        return {
            "tokens": n,
            "p50": self._quantile(counts, n, 0.5, self.window_max),
            "p99": self._quantile(counts, n, 0.99, self.window_max),
            "p999": self._quantile(counts, n, 0.999, self.window_max),
            "max": self.window_max,
        }

    def buckets(self, bounds: Sequence[float]) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        i = 0
        for bound in bounds:
            edge = min(round(bound * self.SCALE), self.SIZE)
            while i < edge:
                acc += self.counts[i]
                i += 1
            out.append((repr(float(bound)), float(acc)))
        out.append(("+Inf", float(self.n)))
        return out


class _Families:
    """Builders of metric families with the model_name / engine labels every vLLM metric has."""

    def __init__(self, model_name: str, created: float) -> None:
        self.labels = ["model_name", "engine"]
        self.base = [model_name, "0"]
        self.created = created

    def gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=self.labels)
        g.add_metric(self.base, value)
        return g

    def counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=self.labels)
        c.add_metric(self.base, value, created=self.created)
        return c

    def hist(self, name: str, doc: str, h: Hist) -> HistogramMetricFamily:
        m = HistogramMetricFamily(name, doc, labels=self.labels)
        m.add_metric(self.base, h.cumulative(), h.sum)
        m.samples.append(
            Sample(f"{name}_created", dict(zip(self.labels, self.base, strict=True)), self.created)
        )
        return m


class SimMetrics(Collector):
    """All counters, gauges and histograms of one simulator."""

    def __init__(
        self, model_name: str, *, block_size: int, kv_blocks: int, prefix_caching: bool
    ) -> None:
        self.model_name = model_name
        self.block_size = block_size
        self.kv_blocks = kv_blocks
        self.prefix_caching = prefix_caching
        self.created = time.time()
        # gauges
        self.num_running = 0
        self.num_waiting = 0
        self.kv_usage = 0.0
        # counters
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.prompt_tokens = 0
        self.prompt_tokens_computed = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.http_requests: dict[tuple[str, str, str], int] = {}
        # histograms
        self.ttft = Hist(TTFT_BUCKETS)
        self.itl = Hist(ITL_BUCKETS)
        self.tpot = Hist(ITL_BUCKETS)
        self.e2e = Hist(REQUEST_TIME_BUCKETS)
        self.queue_time = Hist(REQUEST_TIME_BUCKETS)
        self.inference_time = Hist(REQUEST_TIME_BUCKETS)
        self.prefill_time = Hist(REQUEST_TIME_BUCKETS)
        self.decode_time = Hist(REQUEST_TIME_BUCKETS)
        self.request_prompt_tokens = Hist(TOKEN_BUCKETS)
        self.request_generation_tokens = Hist(TOKEN_BUCKETS)
        self.request_prefill_kv_computed = Hist(TOKEN_BUCKETS)
        self.request_max_tokens = Hist(TOKEN_BUCKETS)
        self.request_params_n = Hist(N_BUCKETS)
        self.request_preemptions = Hist(PREEMPTION_BUCKETS)
        self.iteration_tokens = Hist(ITERATION_TOKEN_BUCKETS)
        # the simulator's own health
        self.fine_lag = FineLag()
        self.step_overrun = 0
        self.faults: dict[str, int] = {}

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def count_http(self, handler: str, status: int) -> None:
        key = (handler, f"{status // 100}xx", "POST" if handler.startswith("/v1/") else "GET")
        self.http_requests[key] = self.http_requests.get(key, 0) + 1

    # -- collection ----------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        f = _Families(self.model_name, self.created)
        yield from self._collect_engine(f)
        yield from self._collect_histograms(f)
        yield from self._collect_server(f)
        yield from self._collect_own(f)

    def _collect_engine(self, f: _Families) -> Iterator[Metric]:
        """Queue, KV-cache and token counters."""
        yield f.gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            self.num_running,
        )
        yield f.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            self.num_waiting,
        )
        yield f.gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage
        )
        yield f.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            self.prefix_queries,
        )
        yield f.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            self.prefix_hits,
        )
        yield f.counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            self.preemptions,
        )
        yield f.counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens
        )
        src = CounterMetricFamily(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            labels=[*f.labels, "source"],
        )
        src.add_metric([*f.base, "local_compute"], self.prompt_tokens_computed, created=f.created)
        src.add_metric([*f.base, "local_cache_hit"], self.prefix_hits, created=f.created)
        yield src
        yield f.counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            self.prefix_hits,
        )
        yield f.counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            self.generation_tokens,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*f.labels, "finished_reason"],
        )
        for reason, value in self.success.items():
            success.add_metric([*f.base, reason], value, created=f.created)
        yield success

    def _collect_histograms(self, f: _Families) -> Iterator[Metric]:
        """Per-request and per-step histograms."""
        yield f.hist(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            self.request_prompt_tokens,
        )
        yield f.hist(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            self.request_generation_tokens,
        )
        yield f.hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            self.iteration_tokens,
        )
        yield f.hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            self.request_max_tokens,
        )
        yield f.hist(
            "vllm:request_params_n", "Histogram of the n request parameter.", self.request_params_n
        )
        yield f.hist(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            self.request_max_tokens,
        )
        yield f.hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            self.ttft,
        )
        yield f.hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            self.itl,
        )
        yield f.hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            self.tpot,
        )
        yield f.hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            self.e2e,
        )
        yield f.hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            self.queue_time,
        )
        yield f.hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            self.inference_time,
        )
        yield f.hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            self.prefill_time,
        )
        yield f.hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            self.decode_time,
        )
        yield f.hist(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            self.request_preemptions,
        )
        yield f.hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            self.request_prefill_kv_computed,
        )

    def _collect_server(self, f: _Families) -> Iterator[Metric]:
        """Cache configuration and HTTP request counts."""
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"],
        )
        info.add_metric(
            [str(self.block_size), str(self.prefix_caching), "0", str(self.kv_blocks)], 1.0
        )
        yield info
        http = CounterMetricFamily(
            "http_requests",
            "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        for (handler, status, method), value in sorted(self.http_requests.items()):
            http.add_metric([handler, method, status], value, created=f.created)
        yield http

    def _collect_own(self, f: _Families) -> Iterator[Metric]:
        """The simulator's own figures: emission lag, late steps, faults."""
        lag = HistogramMetricFamily(
            "agentload_sim:emission_lag_seconds",
            "Distance between the time the timing model "
            "assigned to a token and the time the simulator wrote it. Tail values above a few ms "
            "mean the simulator, not the system under test, is the limit.",
            labels=f.labels,
        )
        lag.add_metric(f.base, self.fine_lag.buckets(LAG_BUCKETS), self.fine_lag.sum)
        yield lag
        overrun = CounterMetricFamily(
            "agentload_sim:late_steps",
            "Engine steps emitted more than 2 ms after their deadline.",
            labels=f.labels,
        )
        overrun.add_metric(f.base, self.step_overrun, created=f.created)
        yield overrun
        faults = CounterMetricFamily(
            "agentload_sim:faults_injected", "Faults injected, by kind.", labels=[*f.labels, "kind"]
        )
        for kind, value in sorted(self.faults.items()):
            faults.add_metric([*f.base, kind], value, created=f.created)
        yield faults
