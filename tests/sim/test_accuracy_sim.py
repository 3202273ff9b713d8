"""The accuracy gate end to end on real sim servers: `hyperloom accuracy` and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

from hyperloom_assets.resources.hosts.preflight import allocate_port
from tests.sim.conftest import LLAMA_8B

BASE = ("--gpu", "H100", "--time-scale", "50")


def accuracy(reference: str, candidate: str, json_path=None, prompts: int = 32) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hyperloom_assets.cli", "accuracy", "--reference-url", reference,
            "--candidate-url", candidate, "--model", str(LLAMA_8B), "--prompts", str(prompts)]
    if json_path is not None:
        argv += ["--json-out", str(json_path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_batching_passes_an_altering_flag_drops_and_a_dead_server_is_unavailable(sim_server, tmp_path) -> None:
    reference, _ = sim_server(LLAMA_8B, *BASE)
    batching, _ = sim_server(LLAMA_8B, *BASE, "--max-num-seqs", "4", "--max-num-batched-tokens", "1024")
    # The harness flag makes --kv-cache-dtype change outputs, as a real fp8 KV cache may.
    altered, _ = sim_server(LLAMA_8B, *BASE, "--alter-outputs-with", "kv-cache-dtype", "--kv-cache-dtype", "fp8")

    passed = accuracy(reference, batching, tmp_path / "pass.json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    record = json.loads((tmp_path / "pass.json").read_text())
    assert record["verdict"] == "pass" and record["agreed"] == record["prompts"] == 32
    assert "32 of 32 prompts agree" in passed.stdout

    dropped = accuracy(reference, altered, prompts=8)
    assert dropped.returncode == 1, dropped.stdout + dropped.stderr
    assert "verdict: drop" in dropped.stdout and "DIFFERS" in dropped.stdout

    nobody = f"http://127.0.0.1:{allocate_port()}"
    unavailable = accuracy(reference, nobody, prompts=4)
    assert unavailable.returncode == 2 and "verdict: unavailable" in unavailable.stdout


def test_the_sim_serves_greedy_tokens_with_top_k_logprobs(sim_server) -> None:
    import urllib.request

    url, _ = sim_server(LLAMA_8B, *BASE)
    body = json.dumps({"model": str(LLAMA_8B), "prompt": "hello there", "max_tokens": 5, "temperature": 0,
                       "logprobs": 8, "return_tokens_as_token_ids": True}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        logprobs = json.loads(reply.read())["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == 5 and all(t.startswith("token_id:") for t in logprobs["tokens"])
    for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"]):
        assert len(top) == 8 and max(top, key=top.get) == token  # greedy: the chosen token is the top one
