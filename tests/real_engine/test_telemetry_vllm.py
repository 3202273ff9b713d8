"""vLLM CPU's own telemetry: every series we read is on its /metrics page.

That vLLM's telemetry then reaches the trials table and the baseline's metadata is checked
by the SSH host's optimize run (tests/fleet/test_ssh_vllm.py), which launches vLLM anyway;
a run of its own would add minutes to the suite (docs/tests.md).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.measurement.telemetry import parse_prometheus, series_value
from hyperloom_assets.resources.bench.client import measure, model_vocab_size
from hyperloom_assets.resources.hosts.process_group import read_pidfiles

pytestmark = pytest.mark.real_engine

ARGS = ["--max-num-seqs", "4", "--enforce-eager", "--max-model-len", "512"]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
# The CPU backend's KV blocks hold 128 tokens: a 320-token prefix fills two, which later prompts hit.
# 96 prompts keep a round busy across several 0.5 s scrapes even on an AMX CPU, where vLLM's
# sgl-kernel GEMMs served 32 within one interval and left only the idle edges (no gauges).
WORKLOAD = {"kind": "shared_prefix", "isl": 384, "prefix_len": 320, "osl": 16, "concurrency": 8, "num_prompts": 96}


def test_every_series_we_read_is_on_vllms_metrics_page(tmp_path, tiny_model, host) -> None:
    names = engine_for("vllm").metrics
    spec = ServerSpec(engine="vllm", model=tiny_model, server_args=ARGS, env=ENV)
    with host.serve(spec, tmp_path / "serve") as launch:
        measured = measure(launch.base_url, launch.served_model, Workload(**WORKLOAD), vocab_size=model_vocab_size(tiny_model), repeats=1)
        with urllib.request.urlopen(launch.base_url + "/metrics", timeout=30) as reply:
            page = parse_prometheus(reply.read().decode())
    for field in type(names).model_fields:
        series = getattr(names, field)
        assert series_value(page, series) is not None, f"{field}: {series.name}"
    t = measured.telemetry
    assert t is not None and t.engine == "vllm" and t.scrapes >= 3, "a scrape between the edges"
    assert t.running_max >= 1 and t.prefix_queries > 0 and t.prefix_hits > 0, t
    assert t.prefill_s > 0 and t.decode_s > 0
    assert read_pidfiles(Path(host.state_path()) / "pids") == []
