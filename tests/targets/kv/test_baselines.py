"""The kv baselines are ordinary candidates, and they rank as the literature says on real shapes."""

from __future__ import annotations

import pytest

from targets.kv.target import KVTarget
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
