"""The serving target's behaviour: how a program orders the sample's arrivals, iterations and caches. A
mutation the fleet cannot see (a guard on a feature every instance shares, adding one constant to each)
shares its parent's signature; a rule that routes some requests otherwise (a switch on the request's size)
does not."""

from __future__ import annotations

import targets
from sandbox.worker import behaviour_signature
from verifiers.static import check

TARGET = targets.load("serving")
FCFS_LRU = "def priority(r, p):\n    return r.waiting\n\n\ndef evict(b, p):\n    return b.last_access\n"
PARAMS = 'PARAMS = {"t": (1.0, 1000.0, "log", 60.0), "w": (0.1, 100.0, "log", 1.0)}'


def signature(route: str, rest: str = FCFS_LRU) -> str:
    source = f'"""A program."""\n{PARAMS}\n\n\ndef route(s, p):\n{route}\n\n\n{rest}'
    return behaviour_signature(TARGET, check(source, TARGET.signatures))


CONDUCTOR = "    return -s.ttft_estimate_s"


def test_a_guard_on_what_every_instance_shares_is_its_parents_behaviour() -> None:
    shared = "    if s.min_outstanding < p.t:\n        return -s.ttft_estimate_s - p.w\n" + CONDUCTOR
    own = "    if s.prompt_blocks > p.t:\n        return -s.ttft_estimate_s - p.w\n" + CONDUCTOR
    assert signature(shared) == signature(CONDUCTOR) == signature(own)
    assert signature("    return -2 * s.ttft_estimate_s + s.best_match") == signature(CONDUCTOR)


def test_routing_otherwise_is_another_behaviour() -> None:
    split = "    if s.prompt_blocks > p.t:\n        return 1 / (1 + s.decode_batch)\n" + CONDUCTOR
    keys = [CONDUCTOR, split, "    return -s.outstanding", "    return s.match", "    return -s.instance"]
    assert len({signature(k) for k in keys}) == len(keys)


def test_the_schedule_and_the_cache_are_part_of_the_behaviour() -> None:
    shortest = FCFS_LRU.replace("r.waiting", "-r.prompt")
    hits = FCFS_LRU.replace("b.last_access", "b.hits")
    assert len({signature(CONDUCTOR, rest) for rest in (FCFS_LRU, shortest, hits)}) == 3
    later = FCFS_LRU.replace("b.last_access", "b.last_access + 5")
    assert signature(CONDUCTOR, later) == signature(CONDUCTOR)


def test_an_arrival_is_one_request_against_every_instance_of_one_fleet() -> None:
    shared = {f.name for f in TARGET.registry("route").features if f.shared}
    assert {"prompt_tokens", "prompt_blocks", "best_match", "min_outstanding", "max_queued"} <= shared
    for decision in TARGET.behaviour_sample("route"):  # the contract test: shared features agree in each
        assert [row["instance"] for row in decision] == list(range(len(decision)))
    sizes = {d[0]["prompt_blocks"] for d in TARGET.behaviour_sample("route")}
    assert min(sizes) <= 4 and max(sizes) >= 60, "short prompts and long ones"
