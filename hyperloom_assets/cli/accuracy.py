"""`hyperloom accuracy --reference-url URL --candidate-url URL --model M [--prompts N] [--json-out OUT]`.

The accuracy gate on its own, against two running OpenAI-compatible servers (roots, as
for `hyperloom bench`): prints the verdict and each prompt's agreement; exits 0 for
pass, 1 for drop, 2 for unavailable (and 2 for bad arguments, as argparse does).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

EXIT_CODES = {"pass": 0, "drop": 1, "unavailable": 2}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom accuracy", description=__doc__.splitlines()[0].strip("`"))
    p.add_argument("--reference-url", required=True, help="the reference server's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--candidate-url", required=True, help="the candidate server's root")
    p.add_argument("--model", required=True, help="the served model name (both servers)")
    p.add_argument("--candidate-model", default=None, help="the candidate's, when it differs")
    p.add_argument("--prompts", type=int, default=32, help="prompts to compare (default 32)")
    p.add_argument("--max-tokens", type=int, default=16, help="greedy tokens generated per prompt (default 16)")
    p.add_argument("--top-k", type=int, default=8, help="top log-probabilities asked for per token (default 8)")
    p.add_argument("--json-out", type=Path, default=None, metavar="PATH", help="also write the full result as JSON here")
    return p


def main(argv: list[str]) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if min(args.prompts, args.max_tokens, args.top_k) < 1:
        cli.error("--prompts, --max-tokens and --top-k must be positive")
    from hyperloom_assets.core.config.targets import AgreementCheck
    from hyperloom_assets.resources.accuracy.gate import compare_servers

    check = AgreementCheck(prompts=args.prompts, max_tokens=args.max_tokens, top_k=args.top_k)
    with tempfile.TemporaryDirectory() as folder:
        result = compare_servers(args.reference_url, args.model, args.candidate_url, args.candidate_model or args.model,
                                 check, Path(folder))
    print(f"verdict: {result.verdict}: {result.reason}")
    for prompt in result.per_prompt:
        print(f"  prompt {prompt.index:2d}: {'agrees' if prompt.agrees else 'DIFFERS'}"
              + (f" ({prompt.detail})" if prompt.detail else f" ({prompt.matched} tokens identical)"))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result.model_dump(mode="json"), indent=1))
    return EXIT_CODES[result.verdict]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
