"""The program database: islands of candidates, each keeping the elite of every MAP-Elites cell.

Islands evolve apart and exchange their best by ring migration, so one lucky lineage does not take over
the whole search; cells (how many features a program reads, how big it is) keep small and simple programs
alive next to large ones. The state is a pure function of the `add` and `migrate` calls made, in order:
the only randomness is the `rng` handed to `sample`, so a resumed run rebuilds it by replaying them.
Scores are larger-is-better; the loop negates objectives that are minimized.
"""

from __future__ import annotations

import ast
import math
import random
from dataclasses import dataclass, field

from search.proposers.base import Entry
from verifiers.program import node_count

Cell = tuple[int, int]
"""(distinct features read, size bucket): where a program sits in the MAP-Elites grid."""

SIZE_BUCKETS = (8, 16, 32, 64)
"""Upper bounds (in AST nodes) of the size buckets; larger programs fall in the last bucket."""


def cell(entry: Entry) -> Cell:
    """The entry's cell: features read on the functions' state arguments, and a bucket of its size."""
    try:
        tree = ast.parse(entry.source)
    except (SyntaxError, ValueError):
        return (0, 0)
    functions = [stmt for stmt in tree.body if isinstance(stmt, ast.FunctionDef)]
    features: set[tuple[str, str]] = set()
    for fn in functions:
        state = fn.args.args[0].arg if fn.args.args else ""
        features |= {
            (fn.name, n.attr)
            for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == state
        }
    size = sum(node_count(fn) for fn in functions)
    bucket = next((i for i, bound in enumerate(SIZE_BUCKETS) if size <= bound), len(SIZE_BUCKETS))
    return (len(features), bucket)


def _rank(entry: Entry) -> float:
    """The score to compare by; a NaN score ranks below everything."""
    return -math.inf if math.isnan(entry.score) else entry.score


def _best(entries: list[Entry]) -> Entry:
    """The highest-scoring entry; the earliest one on ties, so replays agree."""
    return max(entries, key=_rank)


@dataclass
class _Island:
    """One island's population in insertion order, with each member's cell and the elite of every cell."""

    members: list[Entry] = field(default_factory=list)
    cells: dict[int, Cell] = field(default_factory=dict)
    elites: dict[Cell, Entry] = field(default_factory=dict)

    def holds(self, candidate_id: int) -> bool:
        return candidate_id in self.cells

    def best(self) -> Entry | None:
        return _best(self.members) if self.members else None


@dataclass
class ProgramDatabase:
    """Islands of candidates with MAP-Elites cells, tournament parents and ring migration."""

    islands: int = 4
    capacity: int = 40
    """Members an island keeps; beyond it the weakest non-elite member goes."""
    tournament: int = 3
    """Members drawn per parent tournament; the best of them is the parent."""
    explore: float = 0.2
    """Share of parents drawn uniformly among the island's cell elites instead of by tournament."""
    _pools: list[_Island] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.islands < 1 or self.capacity < 1 or self.tournament < 1:
            raise ValueError("islands, capacity and tournament must be at least 1")
        if not 0.0 <= self.explore <= 1.0:
            raise ValueError(f"explore must lie in [0, 1], got {self.explore}")
        self._pools = [_Island() for _ in range(self.islands)]

    def __len__(self) -> int:
        return len({cid for pool in self._pools for cid in pool.cells})

    def add(self, entry: Entry, island: int) -> None:
        """Put an entry on an island; an entry the island already holds (same candidate id) is ignored."""
        if not 0 <= island < self.islands:
            raise IndexError(f"island {island} is outside 0..{self.islands - 1}")
        pool = self._pools[island]
        if pool.holds(entry.candidate_id):
            return
        where = cell(entry)
        pool.members.append(entry)
        pool.cells[entry.candidate_id] = where
        elite = pool.elites.get(where)
        if elite is None or _rank(entry) > _rank(elite):
            pool.elites[where] = entry
        if len(pool.members) > self.capacity:
            self._shrink(pool)

    def sample(self, rng: random.Random) -> tuple[int, Entry, tuple[Entry, ...]]:
        """An island, a parent from it, and 2-4 inspirations: the island's best and elites of other cells."""
        occupied = [i for i, pool in enumerate(self._pools) if pool.members]
        if not occupied:
            raise LookupError("the program database is empty; add the baselines first")
        island = rng.choice(occupied)
        pool = self._pools[island]
        if rng.random() < self.explore:
            parent = rng.choice(list(pool.elites.values()))
        else:
            contenders = rng.sample(pool.members, min(self.tournament, len(pool.members)))
            parent = _best(contenders)
        return island, parent, self._inspirations(rng, island, parent)

    def migrate(self) -> None:
        """Ring migration: each island's best (as it stood before migrating) joins the next island."""
        if self.islands < 2:
            return
        bests = [pool.best() for pool in self._pools]
        for i, best in enumerate(bests):
            if best is not None:
                self.add(best, (i + 1) % self.islands)

    def best(self) -> Entry | None:
        """The best entry over all islands (the first found on ties), or None while empty."""
        entries = [e for pool in self._pools for e in pool.members]
        return _best(entries) if entries else None

    def members(self, island: int) -> tuple[Entry, ...]:
        """An island's members in the order they were added."""
        return tuple(self._pools[island].members)

    def elites(self, island: int) -> dict[Cell, Entry]:
        """An island's elite per occupied cell."""
        return dict(self._pools[island].elites)

    def _inspirations(self, rng: random.Random, island: int, parent: Entry) -> tuple[Entry, ...]:
        pool = self._pools[island]
        chosen: list[Entry] = []
        seen = {parent.candidate_id}

        def take(entry: Entry | None) -> None:
            if entry is not None and entry.candidate_id not in seen:
                seen.add(entry.candidate_id)
                chosen.append(entry)

        take(pool.best())
        parent_cell = pool.cells[parent.candidate_id]
        others = [e for c, e in pool.elites.items() if c != parent_cell]
        others += [b for i, p in enumerate(self._pools) if i != island and (b := p.best()) is not None]
        rng.shuffle(others)
        want = rng.randint(2, 4)
        for entry in others:
            if len(chosen) >= want:
                break
            take(entry)
        return tuple(chosen)

    def _shrink(self, pool: _Island) -> None:
        """Drop the weakest member that is no cell's elite (the weakest of all if every one is)."""
        elite_ids = {e.candidate_id for e in pool.elites.values()}
        candidates = [e for e in pool.members if e.candidate_id not in elite_ids] or pool.members
        victim = min(candidates, key=_rank)
        del pool.members[next(i for i, e in enumerate(pool.members) if e is victim)]
        where = pool.cells.pop(victim.candidate_id)
        if pool.elites.get(where) is victim:
            rest = [e for e in pool.members if pool.cells[e.candidate_id] == where]
            if rest:
                pool.elites[where] = _best(rest)
            else:
                del pool.elites[where]
