"""`hyperloom bench` and `hyperloom agentic-trace`: the benchmark client on its own.

Every input problem (bad flags, a bad trace, a prompt too long for the model, an
unknown SLO key) is reported on stderr with a non-zero exit before any request is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from hyperloom_assets.core.config.targets import Slo, Workload
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.workloads import TraceError, synthetic_trace, write_trace

DEFAULT_VOCAB_SIZE = 32000
INPUT_ERROR = 2
RUN_ERROR = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 with usage; keep that, name the command
        self.print_usage(sys.stderr)
        raise SystemExit(f"{self.prog}: error: {message}")


def bench_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hyperloom bench", description="Benchmark an OpenAI-compatible server (/v1/completions).")
    p.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8000 (the client adds /v1)")
    p.add_argument("--model", required=True, help="the served model name; a local folder also gives vocab and max length")
    p.add_argument("--served-model-name", help="send this model name instead of --model")
    p.add_argument("--workload", required=True, choices=["random", "shared_prefix", "agentic"],
                   help="synthetic random prompts, prompts sharing a prefix, or an agentic trace's sessions")
    p.add_argument("--isl", type=int, help="input tokens per prompt (random, shared_prefix)")
    p.add_argument("--osl", type=int, help="output tokens per request (random, shared_prefix)")
    p.add_argument("--prefix-len", type=int, default=0, help="tokens of the shared prefix (shared_prefix)")
    p.add_argument("--trace", type=Path, help="the JSONL trace (agentic; hyperloom agentic-trace writes one)")
    p.add_argument("--concurrency", type=int, required=True, help="requests in flight at once")
    p.add_argument("--num-prompts", type=int, help="requests per repeat (default: 2 to 10 x concurrency, more for short requests)")
    p.add_argument("--warmups", type=int, default=None, help="warm-up requests (default min(concurrency, 8))")
    p.add_argument("--repeats", type=int, default=1, help="measured repeats, for a confidence interval (default 1)")
    p.add_argument("--request-rate", type=float, help="Poisson arrivals, requests/s (default: all at once)")
    p.add_argument("--seed", type=int, default=0, help="the prompts' and arrivals' seed (default 0)")
    vocab = p.add_mutually_exclusive_group()
    vocab.add_argument("--tokenizer-dir", type=Path, help="a folder with config.json or tokenizer.json")
    vocab.add_argument("--vocab-size", type=int, help=f"token ids to draw prompts from (default {DEFAULT_VOCAB_SIZE})")
    p.add_argument("--max-model-len", type=int, help="default: max_position_embeddings of a local --model")
    p.add_argument("--slo-ttft-ms", type=float, help="a time-to-first-token SLO: report goodput against it")
    p.add_argument("--slo-tpot-ms", type=float, help="a time-per-output-token SLO: report goodput against it")
    p.add_argument("--json-out", type=Path, required=True, metavar="PATH", help="write the measurement as JSON here")
    p.add_argument("--records-dir", type=Path, help="per-request JSONL (default: beside --json-out)")
    p.add_argument("--no-records", action="store_true", help="write no per-request records")
    return p


def _vocab_from_dir(folder: Path) -> int:
    if (folder / "config.json").is_file():
        from hyperloom_assets.core.roofline.model_shape import load_shape
        return load_shape(folder).vocab
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()
    raise ValueError(f"{folder}: neither config.json nor tokenizer.json found")


def resolve_model_limits(args: argparse.Namespace) -> tuple[int, int | None]:
    """(vocab size, max model length) from the flags, else from a local model folder."""
    model_dir = Path(args.model)
    local = (model_dir / "config.json").is_file()
    max_len = args.max_model_len
    if max_len is None and local:
        from hyperloom_assets.core.roofline.model_shape import load_shape
        max_len = load_shape(model_dir).max_position_embeddings
    if args.vocab_size is not None:
        return args.vocab_size, max_len
    if args.tokenizer_dir is not None:
        return _vocab_from_dir(args.tokenizer_dir), max_len
    return (_vocab_from_dir(model_dir) if local else DEFAULT_VOCAB_SIZE), max_len


def workload_from_args(args: argparse.Namespace) -> Workload:
    slo = None
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        slo = Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)
    workload = Workload(kind=args.workload, isl=args.isl, osl=args.osl, prefix_len=args.prefix_len,
                        trace=args.trace, concurrency=args.concurrency, num_prompts=args.num_prompts,
                        request_rate=args.request_rate, slo=slo, seed=args.seed)
    missing = workload.missing_fields()
    if missing:
        raise ValueError("; ".join(f"{field.replace('workload.', '--').replace('_', '-')}: expected {expected}"
                                   for field, expected in missing))
    return workload


def _validation_text(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())


def print_table(measurement: Measurement, out: Path) -> None:
    rows = [("output tok/s", f"{measurement.output_throughput:.1f} "
             f"[{measurement.output_throughput_ci_low:.1f}, {measurement.output_throughput_ci_high:.1f}]"),
            ("requests/s", f"{measurement.request_throughput:.2f}"), ("TTFT p50 / p99 ms",
             f"{measurement.ttft_p50_ms:.1f} / {measurement.ttft_p99_ms:.1f}"),
            ("TPOT p50 ms", f"{measurement.tpot_p50_ms:.2f}"), ("ITL p50 ms", f"{measurement.itl_p50_ms:.2f}"),
            ("E2EL p50 ms", f"{measurement.e2el_p50_ms:.1f}"),
            ("completed/repeat", f"{measurement.completed} ({sum(r.failed for r in measurement.repeats)} failed)"),
            ("repeats", str(len(measurement.repeats))), ("client saturated", str(measurement.client_saturated))]
    for name, value in rows:
        print(f"{name:<20} {value}")
    print(f"wrote {out}")


def _parsed(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, int]:
    """(args, 0), or (None, exit code) after argparse answered (--help, or an error printed)."""
    try:
        return parser.parse_args(argv), 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return None, INPUT_ERROR
        return None, int(exc.code or 0)


def bench_main(argv: list[str]) -> int:
    args, code = _parsed(bench_parser(), argv)
    if args is None:
        return code
    # Imported here so `--help` and flag errors answer without loading aiohttp.
    from hyperloom_assets.resources.bench.runner import BenchInputError, BenchRunError, measure
    try:
        workload = workload_from_args(args)
        vocab_size, max_len = resolve_model_limits(args)
        records = None if args.no_records else (args.records_dir or args.json_out.with_name(args.json_out.stem + "-records"))
        measurement = measure(args.base_url, args.served_model_name or args.model, workload, vocab_size,
                              repeats=args.repeats, warmups=args.warmups, num_prompts=args.num_prompts,
                              records_dir=records, max_model_len=max_len)
    except ValidationError as exc:
        print(f"hyperloom bench: error: {_validation_text(exc)}", file=sys.stderr)
        return INPUT_ERROR
    except (TraceError, BenchInputError, ValueError, OSError) as exc:
        print(f"hyperloom bench: error: {exc}", file=sys.stderr)
        return INPUT_ERROR
    except BenchRunError as exc:
        print(f"hyperloom bench: failed: {exc}", file=sys.stderr)
        return RUN_ERROR
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(measurement.flat(), indent=1) + "\n")
    print_table(measurement, args.json_out)
    return 0


def trace_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hyperloom agentic-trace", description="Write a synthetic agentic trace (JSONL).")
    p.add_argument("--sessions", type=int, required=True, help="independent sessions (each a conversation)")
    p.add_argument("--turns", type=int, required=True, help="turns per session")
    p.add_argument("--first-user-tokens", type=int, default=1024, help="the first turn's prompt tokens, give or take 25%% (default 1024)")
    p.add_argument("--user-tokens", type=int, default=128, help="new user tokens each later turn, give or take 25%% (default 128)")
    p.add_argument("--output-tokens", type=int, default=128, help="output tokens per turn (default 128)")
    p.add_argument("--think-ms", type=float, default=0.0, help="pause between a reply and the next turn (default 0)")
    p.add_argument("--seed", type=int, default=0, help="the trace's seed (default 0)")
    p.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    return p


def trace_main(argv: list[str]) -> int:
    p = trace_parser()
    args, code = _parsed(p, argv)
    if args is None:
        return code
    try:
        counts = {"--sessions": args.sessions, "--turns": args.turns, "--first-user-tokens": args.first_user_tokens,
                  "--user-tokens": args.user_tokens, "--output-tokens": args.output_tokens}
        bad = [f"{flag} must be at least 1, got {value}" for flag, value in counts.items() if value < 1]
        if bad or args.think_ms < 0:
            raise ValueError("; ".join(bad + ([f"--think-ms must be >= 0, got {args.think_ms}"] if args.think_ms < 0 else [])))
        trace = synthetic_trace(args.sessions, args.turns, args.first_user_tokens, args.user_tokens,
                                args.output_tokens, args.think_ms, args.seed)
        write_trace(trace, args.out)
    except ValidationError as exc:
        print(f"hyperloom agentic-trace: error: {_validation_text(exc)}", file=sys.stderr)
        return INPUT_ERROR
    except (ValueError, OSError) as exc:
        print(f"hyperloom agentic-trace: error: {exc}", file=sys.stderr)
        return INPUT_ERROR
    print(f"wrote {args.out}: {args.sessions} sessions x {args.turns} turns")
    return 0
