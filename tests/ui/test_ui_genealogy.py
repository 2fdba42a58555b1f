"""The genealogy of a real run: traced back to the seed baselines, each node a link to its candidate."""

from __future__ import annotations

from dataclasses import replace

from seeded_store import Seeded

from ui import genealogy, nav


def test_the_best_is_traced_back_to_the_baselines_through_parents_and_inspirations(seeded: Seeded) -> None:
    run = seeded.finished
    candidates = seeded.read.candidates(run.run_id)
    by_id = {c.candidate_id: c for c in candidates}
    shown = genealogy.ancestry(candidates, [run.best.candidate_id])
    assert run.best.candidate_id in shown
    for i in shown:
        assert {p for p in (by_id[i].parent_id, *by_id[i].inspirations) if p is not None} <= shown
    assert any(by_id[i].is_baseline for i in shown)
    assert all(by_id[i].is_baseline for i in shown if by_id[i].parent_id is None)


def test_each_node_links_to_its_candidate_and_each_edge_is_a_parent_or_an_inspiration(seeded: Seeded) -> None:
    run = seeded.finished
    candidates = seeded.read.candidates(run.run_id)
    shown = {c.candidate_id for c in candidates}
    text = genealogy.dot(
        candidates, shown, run.best.candidate_id, lambda i: nav.candidate_link(run.run_id, i)
    )
    for c in candidates:
        assert f'URL="candidate?run={run.run_id}&candidate={c.candidate_id}"' in text
        if c.parent_id is not None:
            assert f"c{c.parent_id} -> c{c.candidate_id};" in text
        for i in c.inspirations:
            assert f"c{i} -> c{c.candidate_id} [style=dashed" in text
    assert text.count('fillcolor="#ffd54f"') == 1, "one best"


def test_a_behavioural_duplicate_is_drawn_apart_from_the_failures(seeded: Seeded) -> None:
    run = seeded.finished
    candidate = next(c for c in seeded.read.candidates(run.run_id) if not c.is_baseline)
    drawn = {
        status: genealogy.dot([replace(candidate, status=status)], {candidate.candidate_id}, None, str)
        for status in ("duplicate", "invalid", "evaluated")
    }
    assert f'fillcolor="{genealogy.FILL["duplicate"]}"' in drawn["duplicate"]
    assert f'fillcolor="{genealogy.FILL["failed"]}"' in drawn["invalid"]
    assert len(set(drawn.values())) == 3
