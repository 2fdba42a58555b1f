"""`crucible export --to router`: a route function as a router a user runs with uvicorn in front of real HTTP
backends (recording servers on 127.0.0.1, one process each): it serves a replayed slice completely, routes
as its function says, survives a backend killed mid-run without losing a request, passes a stream through,
and answers a malformed request with a 400."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from search.cli import main
from targets.serving.http_replay import free_port, prompt_text
from targets.serving.workload import requests_of, shipped_workload_path

ROOT = Path(__file__).resolve().parents[3]
SGLANG = ROOT / "targets" / "serving" / "baselines" / "sglang_cache_aware.py"


def start(command: list[str], url: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, f"{command} exited {proc.returncode}"
        assert time.monotonic() < deadline, f"{command} did not answer {url}"
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, list[str], list[subprocess.Popen]]]:
    """The exported SGLang baseline behind uvicorn, in front of four backend processes."""
    main(["export", str(SGLANG), "--to", "router", "--output", str(tmp_path), "--name", "router_under_test"])
    ports = [free_port() for _ in range(4)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    module = [sys.executable, "-m", "targets.serving.http_replay"]
    backends = [start([*module, str(p)], f"{u}/health") for p, u in zip(ports, urls, strict=True)]
    port = free_port()
    env = {"CRUCIBLE_BACKENDS": ",".join(urls), "CRUCIBLE_HEALTH_S": "0.2", "PYTHONPATH": ""}
    uvicorn = [sys.executable, "-m", "uvicorn", "router_under_test:app", "--app-dir", str(tmp_path)]
    router = start(
        [*uvicorn, "--port", str(port), "--log-level", "warning"], f"http://127.0.0.1:{port}/health", env
    )
    try:
        yield f"http://127.0.0.1:{port}", urls, backends
    finally:
        for proc in [router, *backends]:
            stop(proc)


def slice_prompts(n: int) -> list[str]:
    _, prefixes, _ = requests_of(str(shipped_workload_path()), (0, n))
    return [prompt_text(prefixes.blocks[prefixes.offsets[r] : prefixes.offsets[r + 1]]) for r in range(n)]


async def send_all(url: str, prompts: list[str], hold_s: float, gap_s: float) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as client:

        async def one(r: int) -> httpx.Response:
            await asyncio.sleep(r * gap_s)
            body = {"model": "m", "prompt": prompts[r], "max_tokens": 1, "rid": str(r), "hold_s": hold_s}
            return await client.post(url + "/v1/completions", json=body)

        return await asyncio.gather(*(one(r) for r in range(len(prompts))))


def shared_blocks(a: str, b: str) -> int:
    """Leading blocks two prompts share (a block is a character)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def received(urls: list[str]) -> dict[str, list[str]]:
    return {u: httpx.get(u + "/recorded", timeout=5).json()["received"] for u in urls}


def test_the_exported_module_imports_nothing_of_crucible(tmp_path: Path) -> None:
    main(["export", str(SGLANG), "--to", "router", "--output", str(tmp_path), "--name", "standalone"])
    tree = ast.parse((tmp_path / "standalone.py").read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m.split(".")[0] for m in imported} & {"targets", "search", "verifiers", "sandbox", "ui"}


def test_a_program_reading_the_engines_cache_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    program = tmp_path / "reads_cache.py"
    program.write_text(
        '"""Reads the engine\'s cache."""\n\n\ndef route(s, p):\n    return s.cached_blocks\n\n\n'
        "def priority(r, p):\n    return r.waiting\n\n\ndef evict(b, p):\n    return b.last_access\n"
    )
    with pytest.raises(SystemExit) as done:
        main(["export", str(program), "--to", "router"])
    assert done.value.code == 2
    assert "s.cached_blocks, which Crucible's exported router does not expose" in capsys.readouterr().err


def test_a_replayed_slice_is_served_completely_as_the_function_routes(fleet: tuple) -> None:
    url, urls, _ = fleet
    prompts = slice_prompts(60)
    responses = asyncio.run(send_all(url, prompts, hold_s=0.0, gap_s=0.05))  # one at a time
    assert [r.status_code for r in responses] == [200] * 60
    seen = received(urls)
    assert sorted(int(rid) for got in seen.values() for rid in got) == list(range(60))
    where = {int(rid): u for u, got in seen.items() for rid in got}
    # SGLang's rule: a prompt sharing more than 30 % of its blocks with one sent before goes where the
    # longest such prefix went; the others, with every backend idle, to the first.
    hits = 0
    for r, prompt in enumerate(prompts):
        shared = [shared_blocks(prompt, prompts[q]) for q in range(r)]
        if shared and max(shared) / len(prompt) > 0.3:
            hits += 1
            assert where[r] in {where[q] for q in range(r) if shared[q] == max(shared)}
        else:
            assert where[r] == urls[0]
    assert hits > 5


def test_a_backend_killed_mid_run_loses_no_request(fleet: tuple) -> None:
    url, urls, backends = fleet
    prompts = slice_prompts(40)

    async def run() -> list[httpx.Response]:
        sending = asyncio.create_task(send_all(url, prompts, hold_s=1.0, gap_s=0.02))
        await asyncio.sleep(0.5)
        os.killpg(backends[0].pid, signal.SIGKILL)
        return await sending

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * 40
    answered = [r.json()["meta_info"]["backend"] for r in responses]
    assert set(answered) - {urls[0]}, "the others served"
    status = httpx.get(url + "/router/status", timeout=5).json()["backends"]
    assert [b["healthy"] for b in status] == [False, True, True, True]
    assert sum(b["in_flight"] for b in status) == 0


def test_a_stream_is_passed_through(fleet: tuple) -> None:
    url, _, _ = fleet
    body = {"model": "m", "prompt": "hello", "max_tokens": 1, "stream": True, "hold_s": 0.1}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    assert text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize(
    ("content", "said"),
    [("not json", "the body is not JSON"), ('{"model": "m"}', "no prompt"), ("[1, 2]", "not a JSON object")],
)
def test_a_malformed_request_is_a_400(fleet: tuple, content: str, said: str) -> None:
    url, _, _ = fleet
    response = httpx.post(url + "/v1/completions", content=content, timeout=10)
    assert response.status_code == 400
    assert said in response.json()["error"]


def test_the_engines_prometheus_gauges_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main(["export", str(SGLANG), "--to", "router", "--output", str(tmp_path), "--name", "gauges"])
    monkeypatch.setenv("CRUCIBLE_BACKENDS", "http://127.0.0.1:1")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__("gauges")
    vllm = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{model_name="m"} 2.0\nvllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
    )
    sglang = (
        'sglang:num_running_reqs{model_name="m",engine_type="unified"} 7.0\n'
        'sglang:num_queue_reqs{model_name="m",engine_type="unified"} 1.0\n'
        'sglang:token_usage{model_name="m",engine_type="unified"} 0.5\n'
    )
    assert module._metrics(vllm) == {"running": 3.0, "waiting": 2.0, "kv": 0.25}
    assert module._metrics(sglang) == {"running": 7.0, "waiting": 1.0, "kv": 0.5}
    assert module._metrics("not prometheus\n") == {}
