"""A profiler's Chrome trace reduced to where the time goes. Pure code.

Reads what torch's profiler writes (vLLM, SGLang and ATOM all export it, gzipped or
not) and what the sim writes in the same format. Two time bases:
- device: when the trace holds GPU kernels, their time on the device; the device's idle
  time inside the window (launches, scheduling, Python) is the overhead;
- host: otherwise (vLLM CPU, the sim), the ops of the busiest thread, each op's self
  time being its duration less its children's; self time of step annotations (Python
  between ops) and the gaps between top-level ops (the scheduler in another process,
  IPC, and any idle time, which a torch trace cannot tell apart) are the overhead. The
  sim marks its idle time as such.

Every op falls in one category by its name (CATEGORY_RULES, first match wins); the
shares are of the window, so they sum to 100% (up to ops that overlap on the device).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hyperloom_assets.core.models import Frozen

CATEGORIES = ("attention", "gemm", "sampling", "overhead", "communication", "idle", "other")
CATEGORY_MEANING = {
    "attention": "attention kernels, KV-cache writes, rotary embedding",
    "gemm": "matrix multiplies (linear layers, MoE experts)",
    "sampling": "logits to tokens: argmax, top-k/top-p, penalties",
    "overhead": "scheduling and Python: code between ops, gaps between steps, kernel launches",
    "communication": "all-reduce and other collectives",
    "idle": "waiting for work (only the sim can tell it from overhead)",
    "other": "every other op (norms, activations, copies, views)",
}
# (category, pattern on the lower-cased op name); first match wins, so attention's
# fused kernels are never counted as GEMMs.
CATEGORY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("communication", re.compile(r"all_?reduce|all_?gather|reduce_scatter|nccl|rccl|custom_ar|all_to_all")),
    ("attention", re.compile(r"attention|attn|flash|fmha|sdpa|paged|kv_cache|reshape_and_cache|rotary")),
    ("sampling", re.compile(r"sampl|argmax|topk|top_k|top_p|multinomial|log_softmax|penalt|gumbel")),
    ("gemm", re.compile(r"gemm|gemv|matmul|linear|cublas|cutlass|nvjet|onednn_mm|(^|[:_])(add|b)?mm($|[_(.])")),
    ("overhead", re.compile(r"schedul|kernel_launch|launch_kernel|cudalaunch|python")),
    ("idle", re.compile(r"^sim::idle$")),
)
ANNOTATION_CATS = frozenset({"user_annotation", "python_function"})
HOST_CATS = frozenset({"cpu_op", "sim_op"}) | ANNOTATION_CATS
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
GAP_NAMES = {"host": "(between ops: scheduler, IPC, idle)", "device": "(device idle: launches, scheduling, Python)"}
TOP_OPS = 15
# Timestamps are µs with ns digits; an op starting within this of its predecessor's end
# follows it rather than nesting in it (rounding, not a call).
NEST_TOLERANCE_US = 0.005


class TraceError(ValueError):
    """A trace that cannot be read or holds nothing to reduce."""


class OpTime(Frozen):
    name: str
    category: str
    calls: int
    self_ms: float
    share_pct: float  # of the window


class ProfileSummary(Frozen):
    time_base: str  # device | host
    window_ms: float  # first op's start to last op's end, on the time base
    shares_pct: dict[str, float]  # category -> share of the window
    category_ms: dict[str, float]
    top_ops: list[OpTime]  # by self time, at most TOP_OPS
    events: int  # ops reduced


@dataclass
class _Op:
    name: str
    cat: str
    ts: float
    end: float
    self_us: float


def read_trace(path: Path) -> list[dict]:
    """The trace's events; a torch trace is gzipped when its name ends in .gz."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as handle:
            data = json.load(handle)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a readable Chrome trace ({exc})") from exc
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return events


def category_of(name: str, cat: str) -> str:
    if cat in ANNOTATION_CATS:
        return "overhead"
    lowered = name.lower()
    return next((category for category, pattern in CATEGORY_RULES if pattern.search(lowered)), "other")


def _complete(events: Iterable[dict], cats: frozenset[str]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0]


def _self_times(events: list[dict]) -> tuple[list[_Op], float, int]:
    """Ops of one thread with their self time, the time the top-level ops cover, and how many there are."""
    ops = [_Op(str(e.get("name")), e["cat"], float(e["ts"]), float(e["ts"]) + float(e["dur"]), float(e["dur"]))
           for e in sorted(events, key=lambda e: (e["ts"], -e["dur"]))]
    stack: list[_Op] = []
    covered, tops = 0.0, 0
    for op in ops:
        while stack and stack[-1].end <= op.ts + NEST_TOLERANCE_US:
            stack.pop()
        if stack:
            stack[-1].self_us -= min(op.end, stack[-1].end) - op.ts
        else:
            covered, tops = covered + op.end - op.ts, tops + 1
        stack.append(op)
    return ops, covered, tops


def _busiest_thread(events: list[dict]) -> list[dict]:
    threads: dict[tuple, list[dict]] = {}
    for event in events:
        threads.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    return max(threads.values(), key=lambda group: _self_times(group)[1])


def _union_length(ops: list[_Op]) -> tuple[float, int]:
    """Time covered by any op, and in how many separate stretches."""
    total, reach, stretches = 0.0, float("-inf"), 0
    for op in sorted(ops, key=lambda o: o.ts):
        if op.end > reach:
            stretches += op.ts > reach
            total += op.end - max(op.ts, reach)
            reach = op.end
    return total, stretches


def display_name(name: str, cat: str) -> str:
    """Step annotations carry batch sizes in their names; one row per kind of step."""
    return re.sub(r"\d+", "N", name) if cat in ANNOTATION_CATS else name


def reduce_events(events: list[dict]) -> ProfileSummary:
    """Top ops by self time and the categories' shares of the window."""
    device = _complete(events, DEVICE_CATS)
    if device:
        time_base = "device"
        ops = [_Op(str(e.get("name")), e["cat"], float(e["ts"]), float(e["ts"]) + float(e["dur"]), float(e["dur"]))
               for e in device]
        covered, stretches = _union_length(ops)
    else:
        host = _complete(events, HOST_CATS)
        if not host:
            raise TraceError("the trace holds no ops (no cpu_op, kernel or sim_op events)")
        time_base = "host"
        ops, covered, stretches = _self_times(_busiest_thread(host))
    window = max(op.end for op in ops) - min(op.ts for op in ops)
    rows: dict[str, list] = {}
    for op in ops:
        row = rows.setdefault(display_name(op.name, op.cat), [category_of(op.name, op.cat), 0, 0.0])
        row[1] += 1
        row[2] += max(op.self_us, 0.0)
    gap = max(window - covered, 0.0)
    if gap > 0:
        rows[GAP_NAMES[time_base]] = ["overhead", max(stretches - 1, 1), gap]
    return _summary(time_base, window, rows, len(ops))


def _summary(time_base: str, window_us: float, rows: dict[str, list], events: int) -> ProfileSummary:
    window_us = window_us or 1.0
    category_us = dict.fromkeys(CATEGORIES, 0.0)
    for category, _, self_us in rows.values():
        category_us[category] += self_us
    top = sorted(rows.items(), key=lambda item: -item[1][2])[:TOP_OPS]
    return ProfileSummary(
        time_base=time_base, window_ms=window_us / 1e3, events=events,
        shares_pct={c: 100.0 * us / window_us for c, us in category_us.items()},
        category_ms={c: us / 1e3 for c, us in category_us.items()},
        top_ops=[OpTime(name=name, category=category, calls=calls, self_ms=us / 1e3, share_pct=100.0 * us / window_us)
                 for name, (category, calls, us) in top])


def reduce_trace(path: Path) -> ProfileSummary:
    return reduce_events(read_trace(path))
