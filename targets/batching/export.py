"""The batching target in vLLM: `priority(r, p)` as the request priority of vLLM's V1 scheduler.

vLLM's priority policy serves the running list in order, admits waiting requests from a heap ordered by
(priority, arrival time) until one does not fit, and preempts the running request last in that order.
The exported Scheduler subclass sets every live request's priority from the program before each step
(lower is first in vLLM, higher in Crucible, so it negates the score), re-orders the running list and the
waiting heaps by it, and leaves the budget rules to vLLM.
"""

from __future__ import annotations

from targets.export import Export

VLLM_VERSION = "0.34.0"

_VLLM_FEATURES = {
    "now": "now",
    "arrival": "r.arrival_time",
    "waiting": "now - r.arrival_time",
    "prompt": "r.num_prompt_tokens",
    "generated": "r.num_output_tokens",
    "computed": "r.num_computed_tokens",
    "pending": "r.num_tokens - r.num_computed_tokens",
    "decoding": "float(r.num_tokens - r.num_computed_tokens == 1 and r.num_output_tokens > 0 "
    "and r.num_computed_tokens > 0)",
    "running": "float(r.status == RequestStatus.RUNNING)",
    "blocks": "-(-r.num_computed_tokens // self.block_size)",
    "preemptions": "r.num_preemptions",
    "deadline": "self._deadline(r)",
    "slack": "self._deadline(r) - now",
    "free_blocks": "free",
    "queued": "queued",
    "batch": "batch",
}
"""Each feature a vLLM request and the scheduler give, as an expression in Scheduler._features (a request
holds the blocks of its computed tokens; the first token's time is when a step first sees it)."""

_VLLM_TEMPLATE = '''"""$name: a Crucible batching policy as vLLM's V1 scheduler with priority scheduling.

Exported by `crucible export` from $origin. Before every step each live request's priority is set from
priority(r, p) (vLLM serves the lowest value first, so the score is negated): the running list is
re-ordered by it, waiting requests are admitted in its order and preemption takes the lowest first.
PARAMS are the tuned constants (subclass and set `params` to change them).

Load: put this file on vLLM's import path (or `pip install` its folder), then run
    vllm serve MODEL --scheduling-policy priority --scheduler-cls $name.Scheduler
"""

import math
import time
from types import SimpleNamespace

from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.request import RequestStatus

$prelude

NAME = "$name"
PARAMS = $params
TTFT_SLO_S = $ttft_slo_s
TPOT_SLO_S = $tpot_slo_s
"""The SLOs that make a request's deadline, as in the Crucible run the program was tuned in."""


$function

class Scheduler(VllmScheduler):
    """vLLM's scheduler, every request ordered by priority(r, p) at the start of each step."""

    params = SimpleNamespace(**PARAMS)
    clock = staticmethod(time.time)  # the clock vLLM stamps arrival_time with

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.PRIORITY:
            raise ValueError(f"{NAME} orders by priority: run vLLM with --scheduling-policy priority")
        self._first_token = {}  # request id -> when a step first saw its first output token

    def schedule(self, *args, **kwargs):
        self._order(self.clock())
        return super().schedule(*args, **kwargs)

    def _order(self, now):
        queues = [self.waiting, self.kv_holding_waiting, self.async_kv_waiting]
        waiting = [r for q in queues for r in q]
        live = [*self.running, *waiting]
        for r in live:
            if r.num_output_tokens > 0:
                self._first_token.setdefault(r.request_id, now)
        free = self.kv_cache_manager.block_pool.get_num_free_blocks()
        queued, batch = len(waiting), len(self.running)
        for r in live:
            r.priority = -self._score(r, now, free, queued, batch)
        self.running.sort(key=lambda r: (r.priority, r.arrival_time, r.request_id))
        for q in queues:
            held = list(q)
            q.remove_requests(held)
            for r in held:
                q.add_request(r)
        for gone in set(self._first_token) - set(self.requests):
            del self._first_token[gone]

    def _score(self, r, now, free, queued, batch):
        try:
            score = float(priority(self._features(r, now, free, queued, batch), self.params))
        except (ArithmeticError, ValueError):  # a math domain error ranks lowest, as NaN does in Crucible
            return -math.inf
        return -math.inf if math.isnan(score) else score

    def _features(self, r, now, free, queued, batch):
        return SimpleNamespace(
$features        )

    def _deadline(self, r):
        """When the next token is due: arrival + TTFT SLO, then first token + generated x TPOT SLO."""
        first = self._first_token.get(r.request_id)
        if first is None:
            return r.arrival_time + TTFT_SLO_S
        return first + r.num_output_tokens * TPOT_SLO_S
'''


def vllm_export(ttft_slo_s: float, tpot_slo_s: float) -> Export:
    """The vLLM export, its deadlines made with these SLOs (the target's defaults, which PARAMS were tuned
    under)."""
    template = _VLLM_TEMPLATE.replace("$ttft_slo_s", repr(float(ttft_slo_s)))
    return Export(
        engine="vllm",
        title=f"vLLM {VLLM_VERSION}'s request",
        signature="priority",
        features=_VLLM_FEATURES,
        template=template.replace("$tpot_slo_s", repr(float(tpot_slo_s))),
        load="put DIR on vLLM's import path, then run vllm with --scheduling-policy priority "
        "--scheduler-cls $name.Scheduler",
    )
