"""Kernel timings for the sim's calibration: GEMMs over the packaged models' layer shapes and
decode attention over contexts, timed with PyTorch on the GPU at hand (issue 29, item 4).

One prepared script for a lent GPU machine: it needs only Python, PyTorch and the repository's
`models/*/config.json` (the GPU image has no pydantic, so nothing of hyperloom_assets is
imported). For each model at the tensor-parallel sizes the calibration cases and the search
scenarios use, it times the layer's matrix products per GPU (qkv, o, gate_up, down, and the
lm_head), in bf16 and, where the GPU has FP8 tensor cores, FP8 (e4m3, per-tensor scales,
`torch._scaled_mm`), at 1 to 8192 tokens; and decode attention (one query token against L
cached ones, `scaled_dot_product_attention` with grouped KV heads) at 512 to 32768 tokens of
context and batch 1 to 64. Weights rotate through copies larger than twice the L2 cache, as a
model's step reads each layer's weights once; each figure is the median of five timed batches
of back-to-back calls after warm-ups (CUDA events on a GPU, the wall clock on a CPU).

Writes one JSON file: the machine (device name, multiprocessors, L2, torch and CUDA versions,
hostname, date, the command) and a row per timing with its FLOP/s and bytes/s.

    python3 benchmarks/calibration/kernel_timings.py --out $OUT/h200_kernels.json --commit <sha>
    python3 benchmarks/calibration/kernel_timings.py --device cpu --quick --out /tmp/k.json   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
# The tensor-parallel sizes each packaged model is calibrated or searched at.
TP_SIZES = {"llama-3-8b": [1], "qwen2.5-32b": [1], "llama-3-70b": [2, 4, 8], "mixtral-8x7b": [2, 8]}
TOKENS = [2 ** i for i in range(14)]  # 1 .. 8192
CONTEXTS = [512 * 2 ** i for i in range(7)]  # 512 .. 32768
BATCHES = [1, 8, 32, 64]
ROTATE_BYTES = 2 * 60 * 2 ** 20  # twice the largest L2 of the GPUs in the table (H200's 60 MB)


def layer_shape(config: dict) -> dict:
    """The fields of a Hugging Face config.json the layer's products need."""
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    return {"hidden": hidden, "heads": heads, "kv_heads": config.get("num_key_value_heads", heads),
            "head_dim": config.get("head_dim") or hidden // heads, "intermediate": config["intermediate_size"],
            "vocab": config["vocab_size"], "experts": config.get("num_local_experts", 0),
            "experts_per_token": config.get("num_experts_per_tok", 0)}


def gemm_shapes(shape: dict, tp: int) -> list[tuple[str, int, int]]:
    """(op, n, k) per GPU at tensor-parallel size `tp`: columns split for qkv, gate_up and the
    lm_head, rows for o and down. An MoE layer's gate_up and down are one expert's."""
    head_dim, hidden = shape["head_dim"], shape["hidden"]
    return [("qkv", (shape["heads"] + 2 * shape["kv_heads"]) * head_dim // tp, hidden),
            ("o", hidden, shape["heads"] * head_dim // tp),
            ("gate_up", 2 * shape["intermediate"] // tp, hidden),
            ("down", hidden, shape["intermediate"] // tp),
            ("lm_head", shape["vocab"] // tp, hidden)]


class Timer:
    """Median seconds per call of `fn` over five batches of back-to-back calls, after warm-ups."""

    def __init__(self, device: torch.device, quick: bool):
        self.device, self.quick = device, quick

    def _batch(self, fn, calls: int) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1000 / calls
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - began) / calls

    def __call__(self, fn) -> float:
        once = self._batch(fn, 1 if self.quick else 3)  # warm-up, and the size of a batch
        calls = 1 if self.quick else max(1, min(200, math.ceil(0.02 / max(once, 1e-7))))
        return statistics.median(self._batch(fn, calls) for _ in range(1 if self.quick else 5))


def fp8_ready(device: torch.device) -> str | None:
    """None where FP8 products run here, else why not."""
    if device.type != "cuda":
        return "FP8 tensor cores are a GPU's"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return "this GPU has no FP8 tensor cores"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no _scaled_mm"
    return None


def gemm_call(m: int, n: int, k: int, dtype: str, device: torch.device, copies: int):
    """A call of one product; the weights rotate through `copies` so they are read from memory."""
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device=device, dtype=torch.bfloat16) for _ in range(copies)]
    turn = iter(range(10 ** 12))
    if dtype == "bf16":
        return lambda: torch.matmul(a, weights[next(turn) % copies].t())
    scale = torch.ones((), device=device, dtype=torch.float32)
    a8 = a.to(torch.float8_e4m3fn)
    weights8 = [w.to(torch.float8_e4m3fn) for w in weights]  # (n, k) row-major: .t() is column-major
    return lambda: torch._scaled_mm(a8, weights8[next(turn) % copies].t(), scale_a=scale, scale_b=scale,
                                    out_dtype=torch.bfloat16)


def time_gemms(models: dict[str, dict], tokens: list[int], dtypes: list[str], timer: Timer,
               device: torch.device, quick: bool) -> list[dict]:
    rows = []
    for model, shape in models.items():
        for tp in TP_SIZES.get(model, [1])[:1 if quick else None]:
            for op, n, k in gemm_shapes(shape, tp):
                for dtype in dtypes:
                    copies = 1 if quick else max(1, math.ceil(ROTATE_BYTES / (n * k * (1 if dtype == "fp8" else 2))))
                    for m in tokens:
                        row = {"model": model, "tp": tp, "op": op, "m": m, "n": n, "k": k, "dtype": dtype}
                        try:
                            seconds = timer(gemm_call(m, n, k, dtype, device, copies))
                        except (RuntimeError, ValueError) as exc:  # a shape the kernel refuses: said, not fatal
                            rows.append({**row, "error": str(exc).splitlines()[0][:200]})
                            continue
                        moved = (m * k + n * k) * (1 if dtype == "fp8" else 2) + m * n * 2
                        rows.append({**row, "seconds": seconds, "tflops": 2 * m * n * k / seconds / 1e12,
                                     "gbps": moved / seconds / 1e9})
                        print(f"{model} tp{tp} {op:<8} {dtype} m={m:<5} {seconds * 1e6:10.1f} us", flush=True)
    return rows


def time_attention(models: dict[str, dict], contexts: list[int], batches: list[int], timer: Timer,
                   device: torch.device) -> list[dict]:
    rows = []
    for model, shape in models.items():
        tp = TP_SIZES.get(model, [1])[0]
        heads, kv_heads, dim = shape["heads"] // tp, max(1, shape["kv_heads"] // tp), shape["head_dim"]
        for batch in batches:
            for context in contexts:
                q = torch.randn(batch, heads, 1, dim, device=device, dtype=torch.bfloat16)
                k = torch.randn(batch, kv_heads, context, dim, device=device, dtype=torch.bfloat16)
                v = torch.randn_like(k)
                seconds = timer(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != heads))
                read = 2 * batch * kv_heads * context * dim * 2
                rows.append({"model": model, "tp": tp, "batch": batch, "context": context, "heads": heads,
                             "kv_heads": kv_heads, "head_dim": dim, "seconds": seconds, "gbps": read / seconds / 1e9})
                print(f"{model} tp{tp} attention b={batch:<3} ctx={context:<6} {seconds * 1e6:10.1f} us", flush=True)
                del q, k, v
    return rows


def machine(device: torch.device, argv: list[str], commit: str | None) -> dict:
    found = {"hostname": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "device": str(device), "command": argv, "commit": commit,
             "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        found |= {"gpu": props.name, "multiprocessors": props.multi_processor_count,
                  "memory_gib": round(props.total_memory / 2 ** 30, 1),
                  "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2 ** 20, 1)}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--commit", default=None, help="the repository commit the tree was copied from")
    parser.add_argument("--models", nargs="*", default=sorted(TP_SIZES), help="model folders under --models-dir")
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR, help="where they are (default: models/)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: the first TP size, tokens 1 and 16, one context and batch, bf16 only")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    models = {name: layer_shape(json.loads((args.models_dir / name / "config.json").read_text())) for name in args.models}
    timer = Timer(device, args.quick)
    fp8 = fp8_ready(device)
    dtypes = ["bf16"] + ([] if fp8 or args.quick else ["fp8"])
    started = time.monotonic()
    record = {"machine": machine(device, [Path(sys.argv[0]).name, *(argv or sys.argv[1:])], args.commit),
              "fp8": fp8 or "timed", "models": models, "tp_sizes": {m: TP_SIZES.get(m, [1]) for m in models},
              "gemm": time_gemms(models, [1, 16] if args.quick else TOKENS, dtypes, timer, device, args.quick),
              "attention": time_attention(models, CONTEXTS[:1] if args.quick else CONTEXTS,
                                          BATCHES[:1] if args.quick else BATCHES, timer, device)}
    record["machine"]["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(f"wrote {args.out}: {len(record['gemm'])} products, {len(record['attention'])} attention timings "
          f"in {record['machine']['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
