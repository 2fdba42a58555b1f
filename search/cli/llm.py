"""`crucible llm serve`: a local open-weights model at an OpenAI-compatible endpoint, for --proposer llm."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from search.cli import parsing


def add_parser(sub: Any, name: str, help_text: str) -> None:
    from search.proposers.llm.local_model import CONTEXT_TOKENS, MODELS

    s = parsing.add_command(sub, name, help_text)
    ssub = s.add_subparsers(dest="llm_command", required=True)
    serve = ssub.add_parser(
        "serve", help="serve a local model on 127.0.0.1 until Ctrl-C (bash .ci/llm-local installs it)"
    )
    serve.add_argument("--model", required=True, choices=sorted(MODELS), help="the local model")
    serve.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    serve.add_argument(
        "--context", type=int, default=CONTEXT_TOKENS, help="the context in tokens (default: %(default)s)"
    )
    parsing.add_json(serve)
    s.set_defaults(handler=run)


REPLY_TOKENS = 800
"""What a reply is allowed beside the prompt in the served context: a program of the subset with a few
lines of prose is 300 to 700 tokens of Qwen2.5's."""


def run(args: argparse.Namespace) -> None:
    from search.errors import UserError
    from search.proposers.llm.local_model import LocalServer

    if not 0 <= args.port <= 65535 or not 512 <= args.context <= 131072:
        raise UserError("--port takes 0 to 65535 (0: a free one), --context 512 to 131072 tokens")
    server = LocalServer(args.model, args.port, args.context)
    with server:
        use = (
            f"--proposer llm --base-url {server.url} --model {args.model} --llm-concurrency 1 "
            f"--llm-context {args.context} --llm-max-tokens {REPLY_TOKENS}"
        )
        if args.json:
            print(json.dumps({"model": args.model, "base_url": server.url, "use": use}), flush=True)
        else:
            print(f"serving {args.model} at {server.url}; search with: {use}", file=sys.stderr, flush=True)
        try:
            assert server.process is not None
            server.process.wait()
        except KeyboardInterrupt:
            print(f"stopped {args.model}", file=sys.stderr)
            return
    raise UserError(f"the llama.cpp server for {args.model} stopped by itself ({server.ending()})")
