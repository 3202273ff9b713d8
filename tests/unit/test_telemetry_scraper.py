"""The scraper against a real HTTP server: a round shorter than the scrape interval still
gets a scrape between its edges, so its gauges are the busy server's, not None."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from hyperloom_assets.resources.bench.telemetry import FIRST_S, INTERVAL_S, TelemetryScraper

PAGE = "\n".join([
    'vllm:num_requests_running{engine="0",model_name="m"} 5',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 2',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4',
])


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=PAGE)


async def scrape_for(seconds: float):
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            scraper = TelemetryScraper(session, f"http://127.0.0.1:{port}")
            await scraper.start()
            await asyncio.sleep(seconds)
            return await scraper.stop()
    finally:
        await runner.cleanup()


def test_a_round_shorter_than_the_interval_has_a_scrape_between_its_edges() -> None:
    assert FIRST_S < INTERVAL_S
    t = asyncio.run(scrape_for(FIRST_S + 0.15))
    assert t is not None and t.engine == "vllm" and t.scrapes == 3, "the start, one at FIRST_S, the end"
    assert (t.running_mean, t.waiting_max, t.kv_usage_pct_max) == (5.0, 2.0, 40.0)
