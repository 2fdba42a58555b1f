"""The exact Wilcoxon signed-rank test, for the few paired rounds a validation serves.

A validation's rounds are paired (round i of every policy served within minutes of the others), so whether
two policies' order is settled is a question about the signs and sizes of their per-round differences: a
round that goes the other way by a little is weaker evidence against an order than one that goes the other
way by a lot. The rounds are few (3 to 9), so the p-value is counted exactly over every assignment of signs
to the ranks, not approximated."""

from __future__ import annotations


def signed_rank_p(differences: list[float]) -> float:
    """One-sided p-value that the differences lean the way the larger of their two signed rank sums does,
    under the hypothesis that each sign is a coin toss. Zero differences carry no sign and are dropped;
    tied magnitudes share their mean rank. 1.0 when nothing is left."""
    signed = [d for d in differences if d != 0]
    if not signed:
        return 1.0
    doubled = _doubled_ranks([abs(d) for d in signed])  # midranks times two: integers even with ties
    positive = sum(r for r, d in zip(doubled, signed, strict=True) if d > 0)
    observed = max(positive, sum(doubled) - positive)
    ways = {0: 1}  # rank sum (doubled) -> how many sign assignments give it
    for rank in doubled:
        grown = dict(ways)
        for total, count in ways.items():
            grown[total + rank] = grown.get(total + rank, 0) + count
        ways = grown
    return sum(count for total, count in ways.items() if total >= observed) / 2 ** len(signed)


def _doubled_ranks(values: list[float]) -> list[int]:
    """Each value's rank among them (1 = smallest), tied values sharing their mean rank, times two."""
    order = sorted(range(len(values)), key=values.__getitem__)
    doubled = [0] * len(values)
    start = 0
    while start < len(order):
        stop = start
        while stop + 1 < len(order) and values[order[stop + 1]] == values[order[start]]:
            stop += 1
        for i in order[start : stop + 1]:
            doubled[i] = start + stop + 2  # 2 * mean of the ranks start+1 .. stop+1
        start = stop + 1
    return doubled
