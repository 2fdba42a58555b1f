"""The serving simulator's SGLang baseline against the real sglang-router, request by request: the router
runs as its own process in front of recording backends, and the replay holds each request until the
simulated fleet, following the router, has served it (targets/serving/router_check.py)."""

from __future__ import annotations

import json

import pytest
from engine_runs import engine_python

from search.cli import main

pytestmark = pytest.mark.engines


def against_router(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    python = engine_python("router")
    args = ["validate", "--target", "serving", "--against", "sglang-router", "--router-python", str(python)]
    try:
        main([*args, *flags, "--json", "--check"])
        code = 0
    except SystemExit as exc:
        code = exc.code
    shown = json.loads(capsys.readouterr().out)
    assert code in (0, None), shown["checks"]
    return {row["policy"]: row for row in shown["policies"]}


def test_the_router_routes_500_requests_as_the_simulator_does(capsys: pytest.CaptureFixture[str]) -> None:
    rows = against_router(capsys, "--requests", "0:500", "--instances", "4")
    assert rows["cache_aware"]["agreed"] >= 0.9
    assert rows["round_robin"]["agreed"] == 1.0
    # Following the router, the fleet finds the prefixes the simulator's own router found.
    cache_aware = rows["cache_aware"]
    assert cache_aware["hit_rate_router"] == pytest.approx(cache_aware["hit_rate_simulator"], abs=0.01)


def test_a_python_without_the_router_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(
            ["validate", "--target", "serving", "--against", "sglang-router", "--router-python", "/bin/false"]
        )
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no sglang_router" in err[0]
