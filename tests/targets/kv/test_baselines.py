"""The kv baselines are ordinary candidates, and they rank as the literature says on real shapes."""

from __future__ import annotations

import json
from operator import itemgetter
from pathlib import Path

import numpy as np
import pytest

from search.cli.main import main
from targets.base import Objective, OptionError
from targets.kv.block_tree import POLICY_STATIC_KEY
from targets.kv.target import KVTarget, _compiled, replay_trace, shipped_workload_path
from targets.kv.trace import build_trace
from targets.kv_tiered import TieredKVTarget
from verifiers.static import check

TARGET = KVTarget()


@pytest.mark.parametrize("name", sorted(TARGET.baselines()))
def test_every_baseline_passes_the_static_check(name: str) -> None:
    program = check(TARGET.baselines()[name], TARGET.signatures)
    assert program.docstring, "a baseline says what it is"


def test_belady_bounds_every_policy_and_lru_equals_its_own_reference() -> None:
    (train, full) = TARGET.instances("gen:chat:2", {"capacity": 200})
    assert (train.role, full.role) == ("train", "eval")
    programs = {name: check(source, TARGET.signatures) for name, source in TARGET.baselines().items()}
    rates = {
        name: TARGET.evaluate(program, full, program.defaults())["block_hit_rate"]
        for name, program in programs.items()
    }
    rates |= {
        name: TARGET.evaluate_builtin(name, full)["block_hit_rate"] for name in TARGET.builtin_baselines()
    }
    assert rates["belady"] == max(rates.values())
    lru = TARGET.evaluate(check(TARGET.baselines()["lru"], TARGET.signatures), full, {})
    assert lru["gap_closed"] == pytest.approx(0.0)
    assert TARGET.evaluate_builtin("belady", full)["gap_closed"] == pytest.approx(1.0)


def test_a_run_maximizes_the_hit_rate_or_the_prefill_time_saved_as_the_objective_option_says() -> None:
    assert TARGET.objective_for({}) == TARGET.objective == Objective("block_hit_rate", "maximize")
    assert TARGET.objective_for({"objective": "prefill_ms_saved"}) == Objective(
        "prefill_ms_saved", "maximize"
    )
    with pytest.raises(OptionError, match=r"option objective must be one of .*, got 'ttft'"):
        TARGET.objective_for({"objective": "ttft"})
    (option,) = [o for o in TARGET.options if o.name == "objective"]
    assert option.parse("prefill_ms_saved") == "prefill_ms_saved"
    assert TieredKVTarget().objective_for({"capacity": 10}) == Objective("prefill_ms_saved", "maximize")


def test_a_search_for_prefill_time_saved_ranks_its_baselines_by_it(tmp_path: Path, capsys) -> None:
    """The option reaches the search: its best baseline is the one saving the most time, not the one hitting
    most (on the shipped head the cost-aware GDSF saves the most, S3-FIFO hits the most)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    flags = ["--set", "requests=0:600", "--trials", "1", "--workers", "1", "--sandbox", "process"]
    main(
        [
            "search",
            "--target",
            "kv",
            "--set",
            "objective=prefill_ms_saved",
            *flags,
            "--budget",
            "1",
            "--db",
            db,
        ]
    )
    capsys.readouterr()
    main(["runs", "list", "--json", "--db", db])
    (run,) = json.loads(capsys.readouterr().out)
    main(["runs", "show", run["run_id"], "--json", "--db", db])
    shown = json.loads(capsys.readouterr().out)
    assert shown["objective"] == "prefill_ms_saved"
    online = [b for b in shown["baselines"] if not b["oracle"]]
    most_saved = max(online, key=lambda b: b["metrics"]["prefill_ms_saved"])
    most_hits = max(online, key=lambda b: b["metrics"]["block_hit_rate"])
    assert shown["best_baseline"]["name"] == most_saved["name"] != most_hits["name"]
    assert shown["best_baseline"]["score"] == most_saved["metrics"]["prefill_ms_saved"]


def _rows(*requests: tuple[int, list[int]]) -> list[tuple[int, dict[str, object]]]:
    return [
        (i + 1, {"timestamp": t, "input_length": 512 * len(ids), "output_length": 1, "hash_ids": ids})
        for i, (t, ids) in enumerate(requests)
    ]


def test_second_sighting_evicts_a_block_seen_once_before_an_older_one_seen_twice() -> None:
    # block 1 is used twice, then blocks 2 and 3 once each; a fourth block needs room in a 3-block cache
    trace = build_trace(
        _rows((0, [1]), (1000, [1]), (2000, [2]), (3000, [3]), (4000, [4]), (5000, [1])), source="t"
    )
    hits = {
        name: replay_trace(trace, 3, _compiled(TARGET.baselines()[name]), np.zeros(0), POLICY_STATIC_KEY)[0][
            2
        ]
        for name in ("lru", "second_sighting")
    }
    assert hits == {"lru": 1, "second_sighting": 2}, (
        "LRU evicts block 1 (the oldest), second sighting keeps it"
    )


def test_lfu_da_with_a_clock_slower_than_the_trace_is_perfect_lfu() -> None:
    [*_, full] = TARGET.instances(str(shipped_workload_path()), {"capacity": 2000})
    lfu_da = check(TARGET.baselines()["lfu_da"], TARGET.signatures)
    perfect = check(TARGET.baselines()["perfect_lfu"], TARGET.signatures)
    slow = TARGET.evaluate(lfu_da, full, {"clock_s": 1.0e5})  # the head spans 822 s: recency only breaks ties
    fast = TARGET.evaluate(lfu_da, full, {"clock_s": 1.0})
    assert (slow["hits"], slow["evictions"]) == itemgetter("hits", "evictions")(
        TARGET.evaluate(perfect, full, {})
    )
    assert fast["hits"] != slow["hits"], "a fast clock ages frequency out"
