"""Scrape the engine's Prometheus `/metrics` while the measured rounds run.

A background task reads the page at the start, `FIRST_S` later (so a round shorter than
the interval still has a scrape of the server busy: the gauges come only from scrapes
between the edges, core/measurement/telemetry.py), every `interval_s` and at the end; the
pure reader (core/measurement/telemetry.py) turns the scrapes into one Telemetry. A
server without the page (ATOM, an OpenAI-compatible stub) gives None, never an error:
telemetry is evidence for the planner, not a condition of measuring.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from hyperloom_assets.core.engines.registry import metric_names
from hyperloom_assets.core.measurement.telemetry import Scrape, Telemetry, parse_prometheus, speaker_of, telemetry_from_scrapes

INTERVAL_S = 0.5
FIRST_S = 0.1
SCRAPE_TIMEOUT_S = 5.0


class TelemetryScraper:
    """start() before the first measured round, stop() after the last."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, interval_s: float = INTERVAL_S):
        self._session = session
        self._url = base_url.rstrip("/") + "/metrics"
        self._interval_s = interval_s
        self._scrapes: list[Scrape] = []
        self._engine: str | None = None
        self._task: asyncio.Task | None = None

    async def _scrape(self) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
            async with self._session.get(self._url, timeout=timeout) as reply:
                if reply.status != 200:
                    return
                scrape = parse_prometheus(await reply.text())
        except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError, RuntimeError):
            return  # a missed scrape (or a session a failed round closed) leaves a gap
        self._engine = self._engine or speaker_of(scrape, metric_names())
        if self._engine is not None:
            self._scrapes.append(scrape)

    async def _loop(self) -> None:
        await asyncio.sleep(min(FIRST_S, self._interval_s))
        while True:
            await self._scrape()
            await asyncio.sleep(self._interval_s)

    async def start(self) -> None:
        await self._scrape()
        if self._engine is not None:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> Telemetry | None:
        if self._task is None:
            return None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._scrape()
        return telemetry_from_scrapes(self._engine, metric_names()[self._engine], self._scrapes)
