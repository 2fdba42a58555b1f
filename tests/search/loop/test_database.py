"""The program database: cells, tournaments, inspirations, migration, the cap, and rebuilding by replay."""

from __future__ import annotations

import collections
import math
import random

import pytest

from search.loop.database import ProgramDatabase, cell
from search.proposers.base import Entry


def program(*features: str, extra_terms: int = 0) -> str:
    """A candidate reading the given features, padded with literal terms to reach a size bucket."""
    terms = [f"b.{f}" for f in features] + [str(i + 1) for i in range(extra_terms)]
    return f'"""Test program."""\n\n\ndef priority(b, p):\n    return {" + ".join(terms)}\n'


def entry(cid: int, score: float, *features: str, extra_terms: int = 0) -> Entry:
    return Entry(cid, program(*features or ("age",), extra_terms=extra_terms), score)


def test_cell_counts_distinct_features_and_buckets_size() -> None:
    assert cell(entry(0, 0.0, "age")) == (1, 0)
    assert cell(entry(0, 0.0, "age", "hits", "age"))[0] == 2
    assert cell(entry(0, 0.0, "age", extra_terms=20))[1] > cell(entry(0, 0.0, "age"))[1]
    assert cell(Entry(0, "def priority(b, p) return", 0.0)) == (0, 0)


def test_sample_on_an_empty_database_says_so() -> None:
    with pytest.raises(LookupError, match="empty"):
        ProgramDatabase().sample(random.Random(0))
    assert ProgramDatabase().best() is None


def test_add_checks_the_island_and_ignores_repeats() -> None:
    db = ProgramDatabase(islands=2)
    with pytest.raises(IndexError):
        db.add(entry(0, 1.0), 2)
    db.add(entry(0, 1.0), 0)
    db.add(entry(0, 1.0), 0)
    db.add(entry(0, 1.0), 1)
    assert len(db) == 1
    assert len(db.members(0)) == len(db.members(1)) == 1


def test_tournament_favours_score_and_exploration_picks_cell_elites() -> None:
    db = ProgramDatabase(islands=1, tournament=3, explore=0.0)
    for i in range(10):
        db.add(entry(i, float(i), "age"), 0)
    rng = random.Random(1)
    picks = collections.Counter(db.sample(rng)[1].candidate_id for _ in range(3000))
    assert picks[0] == picks[1] == 0  # with three contenders the two worst never win
    assert picks[9] > picks[8] > picks[5] > picks[2]

    explorer = ProgramDatabase(islands=1, explore=1.0)
    for i in range(10):
        explorer.add(entry(i, float(i), "age"), 0)
    explorer.add(entry(10, -5.0, "hits", "depth"), 0)
    parents = {explorer.sample(rng)[1].candidate_id for _ in range(200)}
    assert parents == {9, 10}  # the elite of each of the two cells, the weak one included


def test_inspirations_are_the_island_best_and_other_cells_never_the_parent() -> None:
    db = ProgramDatabase(islands=2, explore=0.3)
    features = ("age", "hits", "depth", "tokens", "fanout")
    for i in range(30):
        db.add(entry(i, float(i % 7), *features[: 1 + i % 5]), i % 2)
    rng = random.Random(3)
    for _ in range(300):
        island, parent, inspirations = db.sample(rng)
        ids = [e.candidate_id for e in inspirations]
        assert 2 <= len(inspirations) <= 4
        assert parent.candidate_id not in ids
        assert len(set(ids)) == len(ids)
        best = max(db.members(island), key=lambda e: e.score)
        if parent.candidate_id != best.candidate_id:
            assert inspirations[0] == best


def test_migration_moves_each_island_best_around_the_ring() -> None:
    db = ProgramDatabase(islands=3)
    for island in range(3):
        for j in range(3):
            db.add(entry(10 * island + j, 10.0 * island + j), island)
    db.migrate()
    assert 2 in {e.candidate_id for e in db.members(1)}
    assert 12 in {e.candidate_id for e in db.members(2)}
    assert 22 in {e.candidate_id for e in db.members(0)}
    assert 12 not in {e.candidate_id for e in db.members(0)}  # one hop per migration, not a cascade
    assert len(db) == 9
    assert db.best() is not None and db.best().candidate_id == 22

    single = ProgramDatabase(islands=1)
    single.add(entry(0, 1.0), 0)
    single.migrate()
    assert len(single.members(0)) == 1


def test_the_cap_keeps_every_cell_elite() -> None:
    db = ProgramDatabase(islands=1, capacity=4)
    weak = entry(0, 0.1, "hits", "depth", "tokens")  # weak, but alone in its cell
    db.add(weak, 0)
    for i in range(1, 20):
        db.add(entry(i, float(i), "age"), 0)
    members = {e.candidate_id for e in db.members(0)}
    assert len(members) == 4
    assert 0 in members
    assert {16, 17, 18, 19} - members == {16}
    assert {c: e.candidate_id for c, e in db.elites(0).items()} == {(1, 0): 19, cell(weak): 0}


def test_the_cap_drops_an_elite_only_when_every_member_is_one() -> None:
    db = ProgramDatabase(islands=1, capacity=2)
    db.add(entry(0, 3.0, "age"), 0)
    db.add(entry(1, 1.0, "age", "hits"), 0)
    db.add(entry(2, 2.0, "age", "hits", "depth"), 0)
    assert [e.candidate_id for e in db.members(0)] == [0, 2]
    assert sorted(e.candidate_id for e in db.elites(0).values()) == [0, 2]


def test_a_nan_score_ranks_last() -> None:
    db = ProgramDatabase(islands=1)
    db.add(entry(0, math.nan, "age"), 0)
    db.add(entry(1, -1.0, "age"), 0)
    assert db.best() is not None and db.best().candidate_id == 1
    assert db.elites(0)[(1, 0)].candidate_id == 1


def test_replaying_the_same_calls_rebuilds_the_same_database() -> None:
    """The store replays `add` (and the loop's migrations) on resume; samples must then come out the same."""
    rng = random.Random(7)
    features = ("age", "hits", "depth", "tokens", "fanout", "evictions")
    calls: list[tuple[Entry, int] | None] = []
    for i in range(120):
        chosen = rng.sample(features, rng.randint(1, 4))
        calls.append((entry(i, rng.random(), *chosen, extra_terms=rng.randint(0, 12)), rng.randrange(4)))
        if i % 25 == 24:
            calls.append(None)

    def build() -> ProgramDatabase:
        db = ProgramDatabase(islands=4, capacity=10)
        for call in calls:
            if call is None:
                db.migrate()
            else:
                db.add(*call)
        return db

    first, second = build(), build()
    assert all(first.members(i) == second.members(i) for i in range(4))
    assert all(first.elites(i) == second.elites(i) for i in range(4))
    assert all(len(first.members(i)) <= 10 for i in range(4))
    a, b = random.Random(11), random.Random(11)
    assert [first.sample(a) for _ in range(50)] == [second.sample(b) for _ in range(50)]
