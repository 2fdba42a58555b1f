"""`crucible sandbox build` and `crucible sandbox check`: the Docker image, and which backends work here."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from sandbox.image import DEBIAN_MIRROR
from search.errors import UserError


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `sandbox build` and `sandbox check` on the CLI's subparsers."""
    s = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
    s.set_defaults(handler=sandbox)
    ssub = s.add_subparsers(dest="sandbox_command", required=True)
    b = ssub.add_parser("build", help="build the image for this source (its name is printed on stdout)")
    b.add_argument(
        "--offline",
        action="store_true",
        help="no registry: debootstrap a Debian root and docker import it as the base (needs root)",
    )
    b.add_argument(
        "--mirror", default=DEBIAN_MIRROR, help="Debian mirror for --offline (default: %(default)s)"
    )
    b.add_argument(
        "--rebuild", action="store_true", help="build again even when the image for this source exists"
    )
    b.add_argument("--json", action="store_true", help="the image's name as JSON on stdout")
    c = ssub.add_parser("check", help="run a baseline job on each backend and say which work and why not")
    c.add_argument("--json", action="store_true", help="machine-readable result on stdout")


def sandbox(args: argparse.Namespace) -> None:
    from sandbox.choice import survey
    from sandbox.image import BuildError, build  # docker's client loads only to build

    if args.sandbox_command == "build":
        try:
            name = build(
                args.offline,
                log=lambda line: print(line, file=sys.stderr, flush=True),
                mirror=args.mirror,
                rebuild=args.rebuild,
            )
        except BuildError as exc:
            raise UserError(str(exc)) from None
        print(json.dumps({"image": name, "offline": args.offline}) if args.json else name)
        return
    found = survey()
    if args.json:
        print(json.dumps([asdict(a) for a in found], indent=2))
    else:
        for a in found:
            print(f"{a.backend:8} {'works' if a.works else 'unavailable':12} {a.detail}")
    if not any(a.works for a in found):
        raise SystemExit(1)
