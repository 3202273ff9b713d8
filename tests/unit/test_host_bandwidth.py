"""Host bandwidth and compute peak: measured, cached once per host, usable as hardware."""

from __future__ import annotations

import json
from pathlib import Path

from hyperloom_assets.core.roofline.model_shape import shape_from_config
from hyperloom_assets.core.roofline.roofline import decode_roofline
from hyperloom_assets.resources.hosts.bandwidth import (
    host_hardware,
    host_key,
    host_measurement,
    measure_memory_bandwidth,
)

SMALL = {"array_bytes": 4 * 1024 * 1024, "matmul_n": 128, "runs": 2}
TINY_SHAPE = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
              "intermediate_size": 704, "vocab_size": 2048, "torch_dtype": "bfloat16"}


def test_copy_bandwidth_is_positive_and_plausible() -> None:
    gbps = measure_memory_bandwidth(array_bytes=4 * 1024 * 1024, runs=2)
    assert 0.1 < gbps < 10_000


def test_measured_once_then_read_from_the_cache(tmp_path: Path) -> None:
    first = host_measurement(tmp_path, **SMALL)
    files = list(tmp_path.glob("host_hardware_*.json"))
    assert len(files) == 1
    assert first.host_key == host_key() and first.mem_bw_gbps > 0 and first.fp32_tflops > 0
    # Different sizes would measure differently; a cache hit ignores them.
    again = host_measurement(tmp_path, array_bytes=8 * 1024 * 1024, matmul_n=64, runs=1)
    assert again == first


def test_a_corrupt_or_foreign_cache_is_measured_again(tmp_path: Path) -> None:
    first = host_measurement(tmp_path, **SMALL)
    path = next(tmp_path.glob("host_hardware_*.json"))
    path.write_text("{not json")
    assert host_measurement(tmp_path, **SMALL).host_key == first.host_key
    foreign = json.loads(path.read_text()) | {"host_key": "elsewhere|cpu|64", "mem_bw_gbps": 1e6}
    path.write_text(json.dumps(foreign))
    assert host_measurement(tmp_path, **SMALL).mem_bw_gbps != 1e6


def test_host_hardware_feeds_the_roofline(tmp_path: Path) -> None:
    hardware = host_hardware(tmp_path, **SMALL)
    assert hardware.kind == "cpu" and hardware.name.startswith("cpu (")
    assert "measured on" in hardware.source
    roofline = decode_roofline(shape_from_config(TINY_SHAPE), hardware, batch=4, mean_context=288)
    assert roofline.hardware == hardware.name
    assert roofline.ceiling_tok_s == min(roofline.memory_bound_tok_s, roofline.compute_bound_tok_s) > 0
