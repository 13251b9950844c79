"""Per-request model-clock timings, for calibration against the simulator itself.

A request carrying ``X-Agentload-Model-Times: 1`` has the model-clock time of its arrival and of
each of its tokens recorded; ``GET /sim/model-times/{id}`` (the response id) returns them. These
times are the timing model's own, free of the host's scheduling noise, so a fit against them
recovers a profile's parameters exactly (see ``agentload sim calibrate``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson
from aiohttp import web

from agentload.sim.engine import Seq

MODEL_TIMES_HEADER = "X-Agentload-Model-Times"
KEEP = 4096


class ModelTimes:
    """The last KEEP recorded requests, by response id."""

    def __init__(self) -> None:
        self.by_id: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def add(self, rid: str, seq: Seq, frontend_s: float) -> None:
        self.by_id[rid] = {
            "id": rid,
            # the request reached the front end this long before the engine queue
            "arrival_s": seq.model_added - frontend_s,
            "token_s": list(seq.model_times or ()),
            "prompt_tokens": seq.prompt_len,
            "cached_tokens": seq.cached_tokens,
        }
        while len(self.by_id) > KEEP:
            self.by_id.popitem(last=False)

    async def handler(self, request: web.Request) -> web.Response:
        item = self.by_id.get(request.match_info["rid"])
        if item is None:
            return web.json_response({"error": "unknown request id"}, status=404)
        return web.Response(body=orjson.dumps(item), content_type="application/json")
