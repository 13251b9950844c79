"""An upstream URL with `user:pass@`: the proxy's other routes (models, metrics, ...) pass
the caller's own Authorization through, and send the URL's credentials as Basic otherwise."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import aiohttp

from agentload.proxy import ProxyConfig, ProxyServer

MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'


async def _upstream(seen: list[dict[str, str]]) -> asyncio.Server:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)
            }
            seen.append({"target": lines[0].split()[1], **headers})
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(MODELS)
                + MODELS
            )
            await w.drain()
        w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_models_route_with_url_credentials(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    server = await _upstream(seen)
    port = server.sockets[0].getsockname()[1]
    cfg = ProxyConfig(upstream=f"http://alice:s3cr%40t@127.0.0.1:{port}", out=tmp_path / "rec")
    async with server, ProxyServer(cfg) as proxy, aiohttp.ClientSession() as s:
        own = {"Authorization": "Bearer caller-key"}
        async with s.get(f"{proxy.base_url}/models", headers=own) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["data"][0]["id"] == "m"
        async with s.get(f"{proxy.base_url}/models") as r:
            assert r.status == 200, await r.text()
    basic = "Basic " + base64.b64encode(b"alice:s3cr@t").decode()
    assert [x["target"] for x in seen] == ["/v1/models", "/v1/models"]
    assert seen[0]["authorization"] == "Bearer caller-key"  # the caller's own wins
    assert seen[1]["authorization"] == basic
