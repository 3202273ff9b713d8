"""The sim's scheduler: continuous batching in simulated time, one step at a time.

Pure code, shared by `sim-serve` (which paces steps against the wall clock) and
`sim-predict` (which runs them back to back). A step is planned (`plan_step`), takes the
perf model's time, then is applied (`apply_step`) at its end time.

vLLM flavor (V1 scheduler): every step, running requests first (one token per decoding
sequence, then the next chunk of a partially prefilled prompt), then waiting requests
are admitted in order while the token budget (`--max-num-batched-tokens`), the sequence
cap (`--max-num-seqs`) and free KV blocks allow; a prompt's cached prefix blocks are
skipped. When KV runs out, the most recently admitted request is preempted: its blocks
are freed and it is recomputed later (prompt plus what it already generated). No new
request is admitted in a step that preempted.
SGLang flavor: a step is either a prefill batch (when a waiting request can be admitted)
or a decode batch, unless `--enable-mixed-chunk`; admission reserves KV for 0.7 x each
running request's remaining output (`--schedule-conservativeness` scales it).

Decoding sequences are kept as aggregates (count, context sum, block-boundary residues,
a heap of finish steps), so a step costs O(log n) however many sequences run.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from hyperloom_assets.sim.engine_args import EngineConfig
from hyperloom_assets.sim.kv_cache import KVBlocks, block_hashes
from hyperloom_assets.sim.perf_model import PerfModel, StepShape
from hyperloom_assets.sim.telemetry import EngineMeter

NOISE_SEGMENT_S = 0.5


@dataclass(eq=False)
class SimRequest:
    rid: int
    prompt_len: int
    max_tokens: int
    hashes: list[int]
    arrival: float
    phase: str = "waiting"  # waiting | prefill | decode | done | aborted
    generated: int = 0
    computed: int = 0
    held: list[int] = field(default_factory=list)
    join_step: int = 0
    ctx_join: int = 0
    gen_join: int = 0
    cached_tokens: int = 0
    admitted_s: float | None = None  # first admission into the running batch
    first_token_s: float | None = None
    finish_s: float | None = None
    spans: list[tuple[int, int]] = field(default_factory=list)  # steps that produced its tokens
    waiter: Any = None  # the server's wake-up hook


@dataclass
class StepPlan:
    shape: StepShape
    decoding: bool
    chunks: list[tuple[SimRequest, int]]
    duration: float


class StepNoise:
    """Seeded multiplicative noise: a drift per half second of simulated time plus per-step jitter."""

    def __init__(self, seed: int, pct: float):
        self.seed = seed
        self.sigma = max(pct, 0.0) / 100.0
        self.jitter = random.Random(seed)
        self.drift: dict[int, float] = {}

    def factor(self, now: float) -> float:
        if self.sigma == 0:
            return 1.0
        segment = int(now / NOISE_SEGMENT_S)
        if segment not in self.drift:
            self.drift[segment] = random.Random(self.seed * 1_000_003 + segment).gauss(0.0, self.sigma)
        return max(0.5, 1.0 + self.drift[segment] + self.jitter.gauss(0.0, self.sigma / 2))


class SimEngine:
    def __init__(self, config: EngineConfig, model: PerfModel, kv_tokens: int, max_model_len: int,
                 noise: StepNoise, record_steps: bool = True):
        self.config = config
        self.model = model
        self.block_size = config.block_size
        self.kv = KVBlocks(kv_tokens // config.block_size, config.block_size, config.prefix_caching)
        self.kv_tokens = kv_tokens
        self.max_model_len = max_model_len
        self.noise = noise
        self.record_steps = record_steps
        self.step_ends: list[float] = []
        self.now = 0.0
        self.steps = 0
        self.waiting: deque[SimRequest] = deque()
        self.running: OrderedDict[int, SimRequest] = OrderedDict()
        self.prefilling: OrderedDict[int, SimRequest] = OrderedDict()
        self.n_decode = 0
        self.ctx_offset = 0  # sum of (ctx_join - join_step) over decoding requests
        self.remaining_offset = 0  # sum of (max_tokens - gen_join + join_step) over decoding requests
        self.residues = [0] * config.block_size
        self.finishes: list[tuple[int, int, SimRequest]] = []
        self.meter = EngineMeter()
        self._next_id = 0

    # ---- requests -------------------------------------------------------------------
    def new_request(self, prompt_ids: list[int], max_tokens: int, arrival: float) -> SimRequest:
        self._next_id += 1
        return SimRequest(rid=self._next_id, prompt_len=len(prompt_ids), max_tokens=max_tokens,
                          hashes=block_hashes(prompt_ids, self.block_size), arrival=arrival)

    def submit(self, request: SimRequest) -> None:
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def tokens_out(self, request: SimRequest) -> int:
        """Tokens the request has produced by the end of the last applied step."""
        if request.phase == "decode":
            return request.gen_join + self.steps - request.join_step
        return request.generated

    def abort(self, request: SimRequest) -> None:
        if request.phase == "waiting":
            self.waiting.remove(request)
        elif request.phase in ("prefill", "decode"):
            self._release(request)
        request.phase = "aborted"

    # ---- block accounting -------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _target(self, request: SimRequest) -> int:
        return request.prompt_len + request.generated

    def _join_decode(self, request: SimRequest, step: int) -> None:
        request.phase, request.join_step = "decode", step
        request.ctx_join, request.gen_join = request.computed, request.generated
        self.n_decode += 1
        self.ctx_offset += request.ctx_join - step
        self.remaining_offset += request.max_tokens - request.gen_join + step
        self.residues[(request.ctx_join - step) % self.block_size] += 1
        heapq.heappush(self.finishes, (step + request.max_tokens - request.generated - 1, request.rid, request))

    def _leave_decode(self, request: SimRequest) -> int:
        """Take a request out of the decode aggregates; returns its KV length now."""
        done = self.steps - request.join_step
        self.n_decode -= 1
        self.ctx_offset -= request.ctx_join - request.join_step
        self.remaining_offset -= request.max_tokens - request.gen_join + request.join_step
        self.residues[(request.ctx_join - request.join_step) % self.block_size] -= 1
        request.generated = request.gen_join + done
        if done > 0:
            request.spans.append((request.join_step, self.steps - 1))
        return request.ctx_join + done

    def _release(self, request: SimRequest) -> None:
        length = self._leave_decode(request) if request.phase == "decode" else request.computed
        self.prefilling.pop(request.rid, None)
        self.running.pop(request.rid, None)
        self.kv.release(request.held, self._blocks(length) - len(request.held))
        request.held = []
        request.computed = 0

    def _preempt_last(self) -> SimRequest:
        victim = next(reversed(self.running.values()))
        self._release(victim)
        victim.phase = "waiting"
        self.waiting.appendleft(victim)
        self.meter.preemptions += 1
        return victim

    def _decode_block_need(self) -> int:
        return self.residues[(-self.steps) % self.block_size]

    def _reserved_blocks(self) -> int:
        """KV SGLang keeps back for the outputs running requests have yet to write."""
        if not self.config.decode_reservation:
            return 0
        remaining = self.remaining_offset - self.n_decode * self.steps
        remaining += sum(r.max_tokens - r.generated for r in self.prefilling.values())
        return int(remaining * self.config.decode_reservation / self.block_size)

    # ---- planning -------------------------------------------------------------------
    def _secure_decode_blocks(self) -> bool:
        """Allocate this step's new decode blocks, preempting from the tail; True if any preempted."""
        preempted = False
        need = self._decode_block_need()
        while need > self.kv.free and self.running:
            self._preempt_last()
            preempted = True
            need = self._decode_block_need()
        self.kv.allocate(need)
        return preempted

    def _continue_prefills(self, budget: int, chunks: list[tuple[SimRequest, int]]) -> int:
        """Next chunks of partially prefilled prompts; a chunk without free blocks waits."""
        for request in self.prefilling.values():
            if budget <= 0:
                break
            chunk = min(self._target(request) - request.computed, budget)
            blocks = self._blocks(request.computed + chunk) - self._blocks(request.computed)
            if not self.kv.allocate(blocks):
                break
            chunks.append((request, chunk))
            budget -= chunk
        return budget

    def _admit(self, budget: int, chunks: list[tuple[SimRequest, int]]) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_seqs:
            request = self.waiting[0]
            target = self._target(request)
            hit = self.kv.hit_blocks(request.hashes, (target - 1) // self.block_size)
            hit_tokens = hit * self.block_size
            chunk = min(target - hit_tokens, budget)
            if not self.config.chunked_prefill and chunk < target - hit_tokens:
                break
            blocks = self._blocks(hit_tokens + chunk) - hit
            reserve = self._reserved_blocks() + int(request.max_tokens * self.config.decode_reservation / self.block_size)
            if blocks + reserve + self.kv.pin_cost(request.hashes[:hit]) > self.kv.free:
                break
            self.waiting.popleft()
            self.kv.pin_hits(request.hashes[:hit])
            allocated = self.kv.allocate(blocks)
            assert allocated, "admission checked the free blocks"
            request.held = list(request.hashes[:hit])
            request.computed, request.phase = hit_tokens, "prefill"
            request.cached_tokens += hit_tokens
            self.meter.prefix_queries += target
            self.meter.prefix_hits += hit_tokens
            if request.admitted_s is None:
                request.admitted_s = self.now
            self.running[request.rid] = request
            self.prefilling[request.rid] = request
            chunks.append((request, chunk))
            budget -= chunk
        return budget

    def _wants_prefill_step(self) -> bool:
        """SGLang (not mixed): run a prefill batch when a prefill can make progress."""
        if self.prefilling:
            return True
        if not self.waiting or len(self.running) >= self.config.max_seqs:
            return False
        request = self.waiting[0]
        need = self._blocks(min(self._target(request), self.config.token_budget))
        reserve = int(request.max_tokens * self.config.decode_reservation / self.block_size)
        return need + reserve + self._reserved_blocks() <= self.kv.free

    def plan_step(self) -> StepPlan | None:
        """Choose the next step's batch (allocating its KV); None when nothing can run."""
        if not self.running and not self.waiting:
            return None
        for _ in range(len(self.running) + 1):
            plan = self._try_plan()
            if plan is not None or not self.running:
                return plan
            self._preempt_last()  # every running prompt is stuck waiting for blocks
        return None

    def _try_plan(self) -> StepPlan | None:
        budget = min(self.config.token_budget, self.config.max_prefill_tokens)
        chunks: list[tuple[SimRequest, int]] = []
        if not self.config.mixed_batches and self._wants_prefill_step():
            left = self._continue_prefills(budget, chunks)
            self._admit(left, chunks)
            if chunks:
                return self._finish_plan(False, chunks)
        preempted = self._secure_decode_blocks()
        if self.config.mixed_batches:
            left = self._continue_prefills(budget - self.n_decode, chunks)
            if not preempted:
                self._admit(left, chunks)
        return self._finish_plan(True, chunks)

    def _finish_plan(self, decoding: bool, chunks: list[tuple[SimRequest, int]]) -> StepPlan | None:
        decode_seqs = self.n_decode if decoding else 0
        if not decode_seqs and not chunks:
            return None
        shape = StepShape(
            decode_seqs=decode_seqs,
            decode_context=self.ctx_offset + self.n_decode * self.steps if decoding else 0,
            prefill_tokens=sum(chunk for _, chunk in chunks),
            prefill_context=int(sum(chunk * (r.computed + chunk / 2) for r, chunk in chunks)),
            prefill_kv_read=sum(r.computed for r, _ in chunks),
        )
        duration = self.model.step_time(shape) * self.noise.factor(self.now)
        return StepPlan(shape=shape, decoding=decoding, chunks=chunks, duration=duration)

    # ---- applying -------------------------------------------------------------------
    def apply_step(self, plan: StepPlan) -> list[SimRequest]:
        """Advance the clock past the step; returns requests that got a first token or finished."""
        step = self.steps
        self.meter.observe_step(plan.duration, len(self.running), len(self.waiting),
                                100.0 * self.kv.used / max(self.kv.total, 1), prefill=bool(plan.chunks),
                                decode=plan.decoding and plan.shape.decode_seqs > 0)
        self.now += plan.duration
        if self.record_steps:
            self.step_ends.append(self.now)
        changed: list[SimRequest] = []
        if not plan.decoding:
            self._pause_decoders(step)
        self.steps += 1
        while self.finishes and self.finishes[0][0] <= step:
            _, _, request = heapq.heappop(self.finishes)
            if request.phase == "decode" and request.join_step + request.max_tokens - request.gen_join - 1 == step:
                self._finish(request)
                changed.append(request)
        for request, chunk in plan.chunks:
            if request.phase == "prefill" and self._apply_chunk(request, chunk, step):
                changed.append(request)
        return changed

    def _pause_decoders(self, step: int) -> None:
        """A prefill-only step (SGLang) produces no decode tokens: every decoder rejoins a step later."""
        paused = [r for r in self.running.values() if r.phase == "decode"]
        self.finishes = []
        for request in paused:
            request.computed = self._leave_decode(request)
            self._join_decode(request, step + 1)

    def _apply_chunk(self, request: SimRequest, chunk: int, step: int) -> bool:
        before = request.computed // self.block_size
        request.computed += chunk
        after = min(request.computed // self.block_size, len(request.hashes))
        for digest in request.hashes[before:after]:
            if self.kv.register(digest):
                request.held.append(digest)
        if request.computed < self._target(request):
            return False
        request.generated += 1
        request.spans.append((step, step))
        first = request.first_token_s is None
        if first:
            request.first_token_s = self.now
        self.prefilling.pop(request.rid, None)
        if request.generated >= request.max_tokens:
            self._finish(request)
            return True
        self._join_decode(request, step + 1)
        return first

    def _finish(self, request: SimRequest) -> None:
        self._release(request)
        request.generated = request.max_tokens
        request.phase = "done"
        request.finish_s = self.now
        if request.admitted_s is not None and request.first_token_s is not None:
            self.meter.observe_request(request.admitted_s, request.first_token_s, request.finish_s)

    def token_times(self, request: SimRequest) -> list[float]:
        """When each of a finished request's tokens was produced (needs record_steps)."""
        return [self.step_ends[s] for first, last in request.spans for s in range(first, last + 1)]
