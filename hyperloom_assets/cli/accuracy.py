"""`hyperloom accuracy --reference-url URL --candidate-url URL --model M [--prompts N] [--json OUT]`.

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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyperloom accuracy")
    parser.add_argument("--reference-url", required=True)
    parser.add_argument("--candidate-url", required=True)
    parser.add_argument("--model", required=True, help="the served model name (both servers)")
    parser.add_argument("--candidate-model", default=None, help="the candidate's, when it differs")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.prompts, args.max_tokens, args.top_k) < 1:
        parser.error("--prompts, --max-tokens and --top-k must be positive")
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
    if args.json is not None:
        args.json.write_text(json.dumps(result.model_dump(mode="json"), indent=1))
    return EXIT_CODES[result.verdict]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
