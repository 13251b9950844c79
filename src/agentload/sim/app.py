"""One simulator: the engine, its metrics and behaviours, and the routes of vLLM's
OpenAI-compatible server over them.

A generation request runs in phases (`SimApp.generate`): admit it (`admission.py`), inject an
HTTP fault (`faults.py`), plan the answer (`plan.py`), open its output (`outputs.py`), run it
through the engine (`engine.py`) and, when not streamed, reply. The bytes on the wire are
`frames.py`'s; the HTTP server is aiohttp's application or `fasthttp.py`, behind `front.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from aiohttp import web

from agentload.sim import admission
from agentload.sim.admission import Admitted
from agentload.sim.behaviour import BehaviourSet, RequestView, ResponsePlan
from agentload.sim.coalesce import coalescing
from agentload.sim.engine import Engine, FrontEndSlot, Output, Seq
from agentload.sim.faults import FAULT_HEADER, HTTP_FAULT_BODIES, HTTP_FAULTS, choose_fault
from agentload.sim.frames import MAX_BODY, VERSION, Item, RequestError, error_body
from agentload.sim.front import AiohttpFront, Front, json_response, reset_connection
from agentload.sim.guard import guard_middleware
from agentload.sim.metrics import SimMetrics
from agentload.sim.modeltime import MODEL_TIMES_HEADER, ModelTimes
from agentload.sim.outputs import Bursts, CollectOut, StreamOut
from agentload.sim.plan import answer_rng, plan_items, request_overhead
from agentload.sim.settings import SimConfig
from agentload.sim.tokenizer import make_tokenizer
from agentload.wire import ROLE_HEADER

log = logging.getLogger("agentload.sim")

_ID_RNG = random.Random()
"""Response ids are unique, not reproducible (tool-call ids follow the seeded output)."""

# Prompts shorter than this (about 1,000 tokens, under a millisecond to tokenise) are
# tokenised inline: the hop to a worker thread and back costs more than it saves.
OFF_LOOP_CHARS = 4096
TOKENIZE_THREADS = 2


class SimApp:
    """One simulator: engine, metrics, behaviours and the aiohttp application."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self.profile = config.resolved_profile()
        # A profile without model time (instant): every timing coefficient zero.
        self.zero_time = not any(
            v for k, v in self.profile.model_dump().items() if k.endswith("_s") and v
        )
        self.tokenizer = make_tokenizer(config.tokenizer)
        self._tokenize_pool = (
            ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="sim-tokenize")
            if self.tokenizer.releases_gil
            else None
        )
        self.metrics = SimMetrics(
            config.model,
            block_size=self.profile.block_size,
            kv_blocks=self.profile.kv_blocks,
            prefix_caching=config.prefix_caching,
        )
        self.engine = Engine(
            self.profile,
            self.metrics,
            speedup=config.speedup,
            prefix_caching=config.prefix_caching,
            log_interval_s=config.log_interval_s,
        )
        self.behaviours = BehaviourSet(config)
        self.counter = 0
        self.created = int(time.time())
        self.model_times = ModelTimes()
        self.app = self._routes()
        self._engine_task: asyncio.Task[None] | None = None
        self.active: set[StreamOut | CollectOut] = set()
        self.bursts = Bursts()
        self.engine.write_gather_begin = self.bursts.begin
        self.engine.write_gather_end = self.bursts.end

    def _routes(self) -> web.Application:
        app = web.Application(
            middlewares=[guard_middleware, self._auth_middleware], client_max_size=MAX_BODY
        )
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics_handler)
        app.router.add_get("/sim/stats", self.stats_handler)
        app.router.add_get("/sim/model-times/{rid}", self.model_times.handler)
        return app

    # -- lifecycle -------------------------------------------------------------------------
    def start_engine(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._engine_task = self._loop.create_task(self.engine.run())

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the engine runs on (the running one before the engine starts)."""
        return self._loop or asyncio.get_running_loop()

    async def stop_engine(self) -> None:
        self.engine.shutdown()
        if self._tokenize_pool is not None:
            self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        for out in list(self.active):
            out.aborted(None)
        if self._engine_task is not None:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task
            self._engine_task = None

    # -- authentication --------------------------------------------------------------------
    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/v1") and self.unauthorized(request.path, request.headers):
            return json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    def unauthorized(self, path: str, headers: Mapping[str, str]) -> bool:
        """A request to `path` without the configured API key (counted as a 401)."""
        key = self.config.api_key
        if key and headers.get("Authorization", "") != f"Bearer {key}":
            self.metrics.count_http(path, 401)
            return True
        return False

    # -- simple endpoints ------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # vLLM answers {"version": ...}; `server` tells preflight this is the simulator.
        return json_response({"version": VERSION, "server": "agentload-sim"})

    async def models(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "object": "list",
                "data": [_model_card(self.config.model, self.created, self.profile.max_model_len)],
            }
        )

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def stats_handler(self, request: web.Request) -> web.Response:
        """The simulator's own figures as JSON; ``?reset=1`` restarts the lag window."""
        m = self.metrics
        body = {
            "running": len(self.engine.running),
            "waiting": len(self.engine.waiting),
            "steps": self.engine.steps,
            "generation_tokens": m.generation_tokens,
            "emitted_tokens_total": m.fine_lag.n,
            "late_steps": m.step_overrun,
            "preemptions": m.preemptions,
            "kv_cache_usage": self.engine.pool.usage(),
            "monotonic_s": time.monotonic(),
            "process_cpu_s": time.process_time(),
        }
        window = m.fine_lag.window()
        body.update(
            {
                "emitted_tokens": window["tokens"],
                "emission_lag_p50_s": window["p50"],
                "emission_lag_p99_s": window["p99"],
                "emission_lag_p999_s": window["p999"],
                "emission_lag_max_s": window["max"],
            }
        )
        if request.query.get("reset"):
            m.fine_lag.mark()
            m.step_overrun = 0
        return json_response(body)

    # -- generation ------------------------------------------------------------------------
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_aiohttp(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_aiohttp(request, chat=False)

    async def _serve_aiohttp(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        front = AiohttpFront(request, self.config.body_timeout_s)
        await self.generate(front, chat=chat)
        return front.response or web.Response(status=200)

    async def generate(self, front: Front, *, chat: bool) -> None:
        """One generation request, in phases: admit, inject an HTTP fault, plan the answer,
        open the output, run it through the engine, and (non-streamed) reply."""
        arrival = time.monotonic()
        # in the front end from now until the queue: the engine's steps pay frontend_step_s
        slot = FrontEndSlot(self.engine)
        try:
            await self._generate(front, chat, arrival, slot)
        finally:
            slot.leave()

    async def _generate(self, front: Front, chat: bool, arrival: float, slot: FrontEndSlot) -> None:
        handler = front.path
        admitted = await self._admit(front, chat)
        if admitted is None:
            return
        fault = admitted.fault
        if fault is not None:
            self.metrics.faults[fault] = self.metrics.faults.get(fault, 0) + 1
        if fault in HTTP_FAULTS:
            self._http_fault(front, handler, HTTP_FAULTS[fault])
            return
        planned = self._plan(front, admitted, chat)
        if planned is None:
            return
        items, tool_ids = planned
        m = self.metrics
        m.request_max_tokens.observe(admitted.max_tokens)
        m.request_params_n.observe(1)
        out = await self._open_output(front, admitted, items, tool_ids, chat)
        if out is None:
            return
        record = front.headers.get(MODEL_TIMES_HEADER) == "1"
        outcome = await self._run_engine(admitted, items, out, arrival, slot, record=record)
        m.count_http(handler, 200)
        if isinstance(out, StreamOut):
            if outcome in ("done", "truncate", "aborted") and not out.ended:
                await front.end_stream()
            return
        await self._full_reply(front, out, fault, outcome)

    async def _admit(self, front: Front, chat: bool) -> Admitted | None:
        """Parse and validate the request, size it, and pick its fault; or None once the
        error reply is out."""
        handler = front.path
        try:
            body = admission.parse_body(await front.body())
            admission.check_options(body, self.config.model)
            prompt = admission.render_prompt(body, chat)
        except RequestError as exc:
            self.metrics.count_http(handler, exc.status)
            # 408: the request body never came, do not wait for another on the connection
            front.reply(exc.status, orjson.dumps(exc.body), close=exc.status == 408)
            return None
        prompt_len, hashes = await self._encode(prompt.parts)
        try:
            max_tokens = admission.max_tokens(body, prompt_len, self.profile.max_model_len)
            admission.check_capacity(prompt_len + max_tokens, self.engine.capacity_tokens())
            counter = self.counter
            self.counter += 1
            fault = choose_fault(
                self.config.seed,
                counter,
                self.config.fault_rate,
                self.config.fault_kinds,
                front.headers.get(FAULT_HEADER),
            )
        except (RequestError, ValueError) as exc:
            err = exc if isinstance(exc, RequestError) else RequestError(400, str(exc))
            self.metrics.count_http(handler, err.status)
            front.reply(err.status, orjson.dumps(err.body))
            return None
        return Admitted(body, prompt, prompt_len, hashes, max_tokens, counter, fault)

    async def _encode(self, parts: list[str]) -> tuple[int, list[int]]:
        """The prompt's token count and block hashes. A long prompt with a tokenizer that
        lets go of the GIL is tokenised on a worker thread, as vLLM's API server does (its
        renderer's thread pool): inline, 10,000 tokens would stop every stream's output for
        about 9 ms. The request's model front end began at arrival, so this time is inside
        it, not added to it."""
        bs = self.profile.block_size
        if self._tokenize_pool is None or sum(map(len, parts)) < OFF_LOOP_CHARS:
            return self.tokenizer.encode_parts(parts, bs)
        return await self.loop().run_in_executor(
            self._tokenize_pool, self.tokenizer.encode_parts, parts, bs
        )

    def _http_fault(self, front: Front, handler: str, status: int) -> None:
        self.metrics.count_http(handler, status)
        headers = {"Retry-After": "1"} if status in (429, 503) else None
        front.reply(status, orjson.dumps(HTTP_FAULT_BODIES[status]), headers)

    def _plan(self, front: Front, adm: Admitted, chat: bool) -> tuple[list[Item], list[str]] | None:
        """What the answer says, token by token (from the behaviour for the caller's role)."""
        body, prompt = adm.body, adm.prompt
        rng = answer_rng(self.config.seed, body, prompt.parts, front.headers, adm.counter)
        view = RequestView(
            body=body,
            messages=list(body.get("messages") or []),
            tools=prompt.tools,
            tool_choice=prompt.tool_choice,
            max_tokens=adm.max_tokens,
            rng=rng,
            headers=front.headers,
            settings=self.config,
            thinking=prompt.thinking,
            prompt_tokens=adm.prompt_len,
            endpoint="chat" if chat else "completions",
            parallel_tool_calls=body.get("parallel_tool_calls", True) is not False,
        )
        role = front.headers.get(ROLE_HEADER)
        try:
            plan = self.behaviours.for_role(role).respond(view)
        except Exception as exc:
            log.exception("behaviour for role %r failed", role)
            self.metrics.count_http(front.path, 500)
            message = (
                f"The simulator's behaviour for role {role!r} failed: {type(exc).__name__}: {exc}"
            )
            front.reply(500, orjson.dumps(error_body(message, 500, "InternalServerError")))
            return None
        if not chat:
            plan = ResponsePlan(content=(plan.content or ""))
        return plan_items(plan, prompt.thinking, rng)

    async def _open_output(
        self,
        front: Front,
        adm: Admitted,
        items: list[Item],
        tool_ids: list[str],
        chat: bool,
    ) -> StreamOut | CollectOut | None:
        """The sink of the tokens: an SSE stream (headers sent now) or a collector; None
        when the client left before the stream could start."""
        rid = (
            f"chatcmpl-{_ID_RNG.getrandbits(64):016x}"
            if chat
            else f"cmpl-{_ID_RNG.getrandbits(64):016x}"
        )
        created = int(time.time())
        if not adm.body.get("stream"):
            return CollectOut(self, rid, items, tool_ids, adm.fault, chat=chat, created=created)
        # With no model time the first events follow at once: hold the headers and send them
        # in the same write (one send() per call instead of two, on both sides). Not for
        # requests with a fault, whose timing of headers and cuts the fault tests rely on.
        hold = self.zero_time and adm.fault is None
        try:
            head = await front.open_stream(hold)
        except ConnectionError:
            return None  # the client left before the headers went out
        transport = front.transport
        if transport is None or transport.is_closing():
            return None
        opts = adm.body.get("stream_options") or {}
        return StreamOut(
            self,
            rid,
            items,
            tool_ids,
            adm.fault,
            transport,
            chat=chat,
            include_usage=bool(opts.get("include_usage")),
            created=created,
            continuous_usage=bool(opts.get("include_usage") and opts.get("continuous_usage_stats")),
            head=head,
            auto_end=front.auto_end,
        )

    async def _run_engine(
        self,
        adm: Admitted,
        items: list[Item],
        out: StreamOut | CollectOut,
        arrival: float,
        slot: FrontEndSlot,
        *,
        record: bool = False,
    ) -> str:
        """Queue the sequence after the front end's delay; the outcome once it is over."""
        p = self.profile
        # A plain stream may send several tokens in one chunk, as a lagging front end does;
        # one with a fault is cut where the fault says.
        sink: Output = out
        if isinstance(out, StreamOut) and out.fault is None:
            sink = coalescing(out, self.engine, p, adm.counter)
        seq = Seq(
            out.rid,
            adm.prompt_len,
            adm.hashes,
            adm.max_tokens,
            len(items),
            sink,
            ignore_eos=bool(adm.body.get("ignore_eos")),
            arrival_t=arrival,
        )
        if record:
            seq.model_times = []
        frontend = request_overhead(p, adm.counter) + p.frontend_token_s * adm.prompt_len
        # The model's front end began when the request came: the simulator's own parsing,
        # tokenising and planning since then are part of it, not added to it. The engine
        # counts it from here (in model time) and queues the request when it is over.
        slot.leave()
        self.active.add(out)
        try:
            self.engine.submit(seq, arrival, frontend)
            return await out.future
        finally:
            self.active.discard(out)
            if record:
                self.model_times.add(out.rid, seq, frontend)

    async def _full_reply(
        self, front: Front, out: CollectOut, fault: str | None, outcome: str
    ) -> None:
        """The JSON body of a non-streamed request, with its fault applied."""
        if fault == "reset":
            if front.transport is not None:
                reset_connection(front.transport)
            front.reply(200, b"")
            return
        body_bytes = out.body
        if fault in ("stall", "stall_first_token"):
            await asyncio.sleep(self.config.fault_stall_s)
        elif fault in ("truncate", "malformed"):
            body_bytes = body_bytes[: len(body_bytes) // 2]
        elif fault == "error_event":
            front.reply(500, orjson.dumps(HTTP_FAULT_BODIES[500]))
            return
        if outcome == "aborted":
            error = error_body("The request was aborted.", 500, "InternalServerError")
            front.reply(500, orjson.dumps(error))
            return
        front.reply(200, body_bytes)


def _model_card(model: str, created: int, max_model_len: int) -> dict[str, Any]:
    """The one entry of `/v1/models`, with vLLM's fields."""
    return {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": f"modelperm-{model}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
