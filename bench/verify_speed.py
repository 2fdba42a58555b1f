"""Z3 verification time per kv candidate, and how often a verdict is `unknown`.

Run from the repository root: `python bench/verify_speed.py [--candidates N] [--seed S] [--seconds T]
[--quick] [--record]` (`--quick`: 6 candidates).
The candidates are what a search verifies: children of the kv baselines written by the offline evolve
proposer, each child becoming a possible parent, as in a run. Each is verified as the loop does it, through
one `Verifier` (a long-lived child process), so the time includes the round trip; the child's start-up is
paid before the clock starts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

import _bench

from search.loop.search import brief, domains
from search.proposers.base import Entry, ProposalFailed, ProposalRequest
from search.proposers.evolve.proposer import EvolveProposer
from targets.kv.target import KVTarget
from verifiers.properties import Outcome
from verifiers.smt import Verifier
from verifiers.static import check


def candidates(count: int, seed: int) -> list[str]:
    """Evolve children of the baselines and of earlier children, distinct sources only."""
    target = KVTarget()
    rng = random.Random(seed)
    pool = list(target.baselines().values())
    proposer = EvolveProposer()
    made: list[str] = []
    while len(made) < count:
        parent, donor = rng.choice(pool), rng.choice(pool)
        request = ProposalRequest(
            target=brief(target),
            parent=Entry(len(made), parent, 0.0),
            inspirations=(Entry(-1, donor, 0.0),),
            failures=(),
            seed=rng.randrange(2**31),
        )
        try:
            source = proposer.propose(request).source
        except ProposalFailed:
            continue
        if source not in made:
            made.append(source)
            pool.append(source)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0, help="Z3's limit per property")
    args, session = _bench.start(parser)
    if session.quick:
        args.candidates = 6

    target = KVTarget()
    sources = candidates(args.candidates, args.seed)
    programs = [check(s, target.signatures) for s in sources]
    properties = target.properties()
    with Verifier(seconds=args.seconds) as verifier:
        verifier.verify(check(target.baselines()["lru"], target.signatures), domains(target), properties)
        times: list[float] = []
        results: list[list[Outcome]] = []
        for program in programs:
            start = time.perf_counter()
            results.append(verifier.verify(program, domains(target), properties))
            times.append(time.perf_counter() - start)

    outcomes = [o for result in results for o in result]
    unknown = sum(o.verdict == "unknown" for o in outcomes)
    by_property: dict[str, Counter[str]] = {}
    for o in outcomes:
        by_property.setdefault(o.property, Counter())[o.verdict] += 1
    print(f"kv candidates verified:        {len(programs)} (evolve children, seed {args.seed})")
    print(f"properties per candidate:      {len(properties)} (Z3 limit {args.seconds:g} s each)")
    print(f"median seconds per candidate:  {statistics.median(times):.4f}")
    print(f"p90 / max seconds:             {statistics.quantiles(times, n=10)[-1]:.4f} / {max(times):.4f}")
    print(f"unknown share of verdicts:     {unknown / len(outcomes):.4f} ({unknown} of {len(outcomes)})")
    with_unknown = sum(any(o.verdict == "unknown" for o in r) for r in results)
    rejected = sum(any(o.rejects for o in r) for r in results)
    print(f"candidates with an unknown:    {with_unknown / len(results):.4f}")
    print(f"candidates rejected (hard):    {rejected / len(results):.4f}")
    for name, counts in by_property.items():
        print(f"  {name:24s} " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    session.save(
        {
            "summary": [
                {
                    "candidates": len(programs),
                    "properties": len(properties),
                    "Z3 limit s": args.seconds,
                    "median s": statistics.median(times),
                    "p90 s": statistics.quantiles(times, n=10)[-1],
                    "max s": max(times),
                    "unknown share": unknown / len(outcomes),
                    "rejected share": rejected / len(results),
                }
            ],
            "verdicts by property": [{"property": name, **counts} for name, counts in by_property.items()],
        }
    )


if __name__ == "__main__":
    main()
