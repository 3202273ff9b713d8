"""Client-saturation detection: a blocked event loop and a busy core both count."""

import asyncio
import time

from hyperloom_assets.resources.bench.monitor import ClientLoad, LoadMonitor


def test_a_blocked_loop_is_saturated():
    async def blocked() -> ClientLoad:
        monitor = LoadMonitor()
        monitor.start()
        await asyncio.sleep(0.03)
        for _ in range(3):
            time.sleep(0.12)  # parsing that never yields: the ticker wakes 120 ms late
            await asyncio.sleep(0.001)
        return await monitor.stop()

    load = asyncio.run(blocked())
    assert load.loop_lag_p99_ms > 100 and load.saturated


def test_either_symptom_sets_the_flag():
    assert ClientLoad(loop_lag_p99_ms=51, cpu_pct=10, wall_s=1).saturated
    assert ClientLoad(loop_lag_p99_ms=1, cpu_pct=95, wall_s=1).saturated
    assert not ClientLoad(loop_lag_p99_ms=1, cpu_pct=40, wall_s=1).saturated
