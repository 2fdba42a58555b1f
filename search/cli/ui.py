"""`crucible ui`: serve the Streamlit app in ui/ on the same store as the CLI.

The process execs `streamlit run ui/app.py`; the search package never imports the
ui package (ui -> search, not the reverse), so the app's file is located without importing it.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from search.errors import UserError
from search.settings import DEFAULT_STORE, STORE_ENV, redacted


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `ui` on the CLI's subparsers."""
    u = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
    u.set_defaults(handler=ui)
    u.add_argument("--db", default=DEFAULT_STORE, help=f"store URL (default {DEFAULT_STORE})")
    u.add_argument("--port", type=int, default=8501, help="port to serve on (default %(default)s)")
    u.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    u.add_argument("--json", action="store_true", help="say where it serves as one JSON line on stdout")


def app_path() -> Path:
    """The app's entry file: the installed ui package, else the ui folder next to this package."""
    spec = importlib.util.find_spec("ui")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations)))
    else:
        folder = Path(__file__).resolve().parent.parent / "ui"
    if not (folder / "app.py").is_file():
        raise UserError(f"the web UI's app is missing ({folder / 'app.py'}); reinstall crucible with '.[ui]'")
    return folder / "app.py"


def streamlit_command(port: int, host: str) -> list[str]:
    """The `streamlit run` command line: headless, no usage statistics, no file watcher."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path()),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
        "--theme.base",
        "light",
    ]


def check_address(host: str, port: int) -> None:
    """Bind the address once as the server will (address reuse on, as Tornado sets it), so a host this
    machine does not have or a port in use is one line here, not Streamlit's traceback after a claim to
    serve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: not an address of this machine ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"--port {port}: already in use on {host}; choose another port") from None
            raise UserError(f"--host {host}: cannot serve there ({exc.strerror})") from None


def ui(args: argparse.Namespace) -> None:
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    if importlib.util.find_spec("streamlit") is None:
        raise UserError("the web UI needs Streamlit: pip install -e '.[ui]'")
    check_address(args.host, args.port)
    command = streamlit_command(args.port, args.host)
    address = f"http://{args.host}:{args.port}"
    if args.json:
        print(json.dumps({"url": address, "store": redacted(args.db)}), flush=True)
    print(f"crucible ui: {address} on {redacted(args.db)}", file=sys.stderr, flush=True)
    # This process becomes the server, so Ctrl-C and a supervisor's SIGTERM reach Streamlit itself.
    os.execve(sys.executable, command, {**os.environ, STORE_ENV: args.db})
