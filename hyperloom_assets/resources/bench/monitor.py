"""Is the client itself the bottleneck? Event-loop lag and the client's CPU share.

A saturated client stretches TTFT and ITL by its own queueing and reports the server
slower than it is. Two symptoms give it away: a periodic ticker wakes up late (the loop
is busy parsing), and the process burns close to a whole core over the round.
"""

from __future__ import annotations

import asyncio
import time

import psutil

from hyperloom_assets.core.measurement.stats import percentile
from hyperloom_assets.core.models import Strict

TICK_S = 0.01
LAG_P99_LIMIT_MS = 50.0
CPU_LIMIT_PCT = 90.0  # of one core, over the round


class ClientLoad(Strict):
    loop_lag_p99_ms: float
    cpu_pct: float  # of one core
    wall_s: float

    @property
    def saturated(self) -> bool:
        return self.loop_lag_p99_ms > LAG_P99_LIMIT_MS or self.cpu_pct > CPU_LIMIT_PCT


class LoadMonitor:
    """Watch one round: start() before the first request, stop() after the last."""

    def __init__(self, tick_s: float = TICK_S):
        self._tick_s = tick_s
        self._lags: list[float] = []
        self._task: asyncio.Task | None = None
        self._process = psutil.Process()
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._tick_s
            await asyncio.sleep(self._tick_s)
            self._lags.append(max(0.0, loop.time() - due))

    def start(self) -> None:
        self._cpu0 = self._cpu_seconds()
        self._wall0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> ClientLoad:
        wall = time.perf_counter() - self._wall0
        cpu = self._cpu_seconds() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        return ClientLoad(loop_lag_p99_ms=percentile(self._lags, 99) * 1000,
                          cpu_pct=100.0 * cpu / wall if wall > 0 else 0.0, wall_s=wall)
