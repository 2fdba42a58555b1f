"""Ctrl-C for a command under test: started, interrupted once `ready()` says so, timed until it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Interrupted:
    code: int
    err: str
    took_s: float
    """Seconds from the SIGINT to the exit."""


def interrupted(words: list[str], ready: Callable[[], bool], wait_s: float = 120.0) -> Interrupted:
    """Run `words` (OPENAI_API_KEY set), send SIGINT once `ready()` or `wait_s` passed, and wait 30 s."""
    env = {**os.environ, "OPENAI_API_KEY": "unused"}
    run = subprocess.Popen(words, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + wait_s
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    sent = time.monotonic()
    run.send_signal(signal.SIGINT)
    try:
        _, err = run.communicate(timeout=30)
    finally:
        run.kill()
    return Interrupted(run.returncode, err, time.monotonic() - sent)
