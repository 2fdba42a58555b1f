"""The Pareto front: the points no other point is at least as good as on every objective and better on one."""

from __future__ import annotations

from search.stats.pareto import dominates, front


def test_a_point_dominates_one_it_matches_everywhere_and_beats_somewhere() -> None:
    up_down = [True, False]  # maximize the first, minimize the second
    assert dominates([0.9, 10.0], [0.8, 10.0], up_down)
    assert dominates([0.9, 9.0], [0.8, 10.0], up_down)
    assert not dominates([0.9, 11.0], [0.8, 10.0], up_down), "better on one, worse on the other"
    assert not dominates([0.9, 10.0], [0.9, 10.0], up_down), "an equal point does not dominate"


def test_the_front_keeps_every_trade_off_and_equal_points() -> None:
    points = [[0.9, 20.0], [0.8, 10.0], [0.7, 5.0], [0.7, 12.0], [0.9, 20.0], [0.6, 30.0]]
    assert front(points, [True, False]) == [0, 1, 2, 4]
    assert front(points, [False, True]) == [5], "the directions decide"
    assert front([[1.0]], [True]) == [0] and front([], [True, False]) == []
