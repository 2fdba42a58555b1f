"""Engine jobs run in the sandbox like any other: the image carries the torch extra when it is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.docker import DockerSandbox
from search.cli.main import main

pytestmark = [pytest.mark.docker, pytest.mark.torch]


def test_validate_replays_real_kernels_inside_the_docker_sandbox(
    docker_box: DockerSandbox, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    main(
        ["validate", "--target", "kv", "--candidates", "lru", "belady", "--workload", "gen:chat:1",
         "--requests", "0:30", "--capacity", "60", "--block-tokens", "4", "--repeats", "1",
         "--sandbox", "docker", "--json", "--db", f"sqlite:///{tmp_path / 'runs.db'}"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert "sandbox: docker" in captured.err
    report = json.loads(captured.out)
    belady, lru = report["policies"]["belady"], report["policies"]["lru"]
    assert belady["engine_hit_tokens"] >= lru["engine_hit_tokens"] > 0
    assert report["max_logit_diff"] < 1e-4
