"""The model servers the proposer benchmarks ask, reached by the openai SDK through its own variables.

- `vllm_tiny`: vLLM CPU serving the generated tiny random Llama (the floor: its replies
  are noise, so its rounds fall back to the rule planner or propose what the guard or
  the space refuses);
- `scripted`: tests/proposer/scripted_llm.py, an in-process HTTP thread answering with a
  written script (an oracle, not a model).
Each yields an LlmServer: the SDK variables that reach it (set them with `environment`),
the target's `proposer:` field for it (max_rounds left to the benchmark) and the reply
cap for LlmProviders.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts.local import LocalHost
from tests.proposer.scripted_llm import ScriptedLlm

# The tiny model's noise is cut at a few hundred tokens: the floor costs seconds, not minutes.
TINY_MAX_TOKENS = 256


@dataclass(frozen=True)
class LlmServer:
    env: dict[str, str]  # the SDK's variables that reach the server
    proposer: dict  # the target's `proposer:` field for it, max_rounds left out
    max_tokens: int  # LlmProviders' cap on a reply


@contextmanager
def vllm_tiny(folder: Path) -> Iterator[LlmServer]:
    """vLLM CPU serving the generated tiny Llama, reached by the openai SDK."""
    model = folder / "tiny-llama"
    subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "tiny-model", str(model)], check=True,
                   capture_output=True)
    host = LocalHost(state_dir=str(folder / "llm-state"), check_foreign_processes=False)
    spec = ServerSpec(engine="vllm", model=model, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                      server_args=["--enforce-eager", "--max-num-seqs", "2", "--max-model-len", "4096"])
    with host.serve(spec, folder / "llm-run", label="tiny model for the proposer") as served:
        yield LlmServer(env={"OPENAI_BASE_URL": f"{served.base_url}/v1", "OPENAI_API_KEY": "not-needed-by-vllm"},
                        proposer={"provider": "openai", "model": served.served_model, "source_bytes": 0,
                                  "flag_help": False},
                        max_tokens=TINY_MAX_TOKENS)


@contextmanager
def scripted(script: dict[str, list[str]], model: str = "scripted-oracle") -> Iterator[LlmServer]:
    """ScriptedLlm answering each role with its script (the last reply repeats)."""
    with ScriptedLlm(script) as llm:
        yield LlmServer(env={"OPENAI_BASE_URL": f"http://127.0.0.1:{llm.port}/v1", "OPENAI_API_KEY": "scripted"},
                        proposer={"provider": "openai", "model": model}, max_tokens=4096)


@contextmanager
def environment(env: dict[str, str | None]) -> Iterator[None]:
    """These variables set for the block (None: unset in it), the earlier values back after it."""
    saved = {k: os.environ.get(k) for k in env}
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
