"""The batching-offline target in vLLM: `priority(r, p)` as request priority in vLLM's V1 scheduler.

Crucible scores a sequence when it joins the waiting queue; the exported Scheduler does the same before each
step: a request it has not scored, or one preempted since, gets its priority from the program (negated:
vLLM serves the lowest value first), and the waiting heaps and the running list are put in that order.
What only the batch knows is computed over the requests the scheduler has seen, which for the `LLM`
class's `generate` is the whole batch before its first step: a request's position in submission order,
and its place when the prompts are sorted by token ids, with the tokens it shares with a neighbour there
(in whole KV blocks; Crucible counts the batch's prefix blocks).
"""

from __future__ import annotations

from targets.batching.export import VLLM_VERSION
from targets.export import Export

_VLLM_FEATURES = {
    "prompt": "r.num_prompt_tokens",
    "output": "r.max_tokens",
    "order": "self._batch[r.request_id][0]",
    "prefix_rank": "self._batch[r.request_id][1]",
    "shared": "self._batch[r.request_id][2]",
    "preemptions": "r.num_preemptions",
}
"""Each feature a vLLM request and the batch seen so far give, as an expression in Scheduler._features."""

_VLLM_TEMPLATE = '''"""$name: a Crucible offline batch policy as vLLM's V1 scheduler with priority scheduling.

Exported by `crucible export` from $origin. A request is scored with priority(r, p) when the scheduler
first sees it and again after each preemption (vLLM serves the lowest value first, so the score is
negated); waiting requests are admitted in that order, running ones served in it, and preemption takes the
lowest first. PARAMS are the tuned constants; where they hold token_budget or max_seqs, pass them to vLLM
as max_num_batched_tokens and max_num_seqs.

Load: put this file on vLLM's import path (or `pip install` its folder), then
    LLM(model=MODEL, scheduling_policy="priority", scheduler_cls="$name.Scheduler")
"""

import math
from types import SimpleNamespace

from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

$prelude

NAME = "$name"
PARAMS = $params


$function

class Scheduler(VllmScheduler):
    """vLLM's scheduler, each request ordered by priority(r, p) as it joins the waiting queue."""

    params = SimpleNamespace(**PARAMS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.PRIORITY:
            raise ValueError(f"{NAME} orders by priority: run vLLM with scheduling_policy='priority'")
        self._batch = {}  # request id -> (position, prefix rank, shared tokens)
        self._scored = {}  # request id -> its preemptions when it was last scored
        self._prompts = {}  # request id -> prompt token ids, for the prefix order

    def schedule(self, *args, **kwargs):
        self._order()
        return super().schedule(*args, **kwargs)

    def _order(self):
        queues = [self.waiting, self.kv_holding_waiting, self.async_kv_waiting]
        waiting = [r for q in queues for r in q]
        new = [r for r in waiting if r.request_id not in self._prompts]
        if new:
            self._learn(new)
        stale = [r for r in waiting if self._scored.get(r.request_id) != r.num_preemptions]
        for r in stale:
            r.priority = -self._score(r)
            self._scored[r.request_id] = r.num_preemptions
        if stale:
            for q in queues:
                held = list(q)
                q.remove_requests(held)
                for r in held:
                    q.add_request(r)
        self.running.sort(key=lambda r: (r.priority, r.arrival_time, r.request_id))
        for gone in set(self._scored) - set(self.requests):
            del self._scored[gone]

    def _learn(self, new):
        """Number the new requests in submission order, then rank every prompt seen by its token ids."""
        for r in sorted(new, key=lambda r: (r.arrival_time, _number(r.request_id))):
            self._prompts[r.request_id] = tuple(r.prompt_token_ids)
            self._batch[r.request_id] = (len(self._prompts) - 1, 0, 0)
        ids = sorted(self._prompts, key=lambda i: (self._prompts[i], self._batch[i][0]))
        rank = 0
        for k, i in enumerate(ids):
            prompt = self._prompts[i]
            if k and prompt != self._prompts[ids[k - 1]]:
                rank = k
            common = max(
                _common(prompt, self._prompts[ids[k - 1]]) if k else 0,
                _common(prompt, self._prompts[ids[k + 1]]) if k + 1 < len(ids) else 0,
            )
            shared = common // self.block_size * self.block_size
            self._batch[i] = (self._batch[i][0], rank, shared)

    def _score(self, r):
        try:
            score = float(priority(self._features(r), self.params))
        except (ArithmeticError, ValueError):  # a math domain error ranks lowest, as NaN does in Crucible
            return -math.inf
        return -math.inf if math.isnan(score) else score

    def _features(self, r):
        return SimpleNamespace(
$features        )


def _number(request_id):
    """The LLM class numbers its requests "0", "1", ...: in that order, not as strings sort."""
    return (0, int(request_id), "") if request_id.isdigit() else (1, 0, request_id)


def _common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
'''


def vllm_offline_export() -> Export:
    """The vLLM export of an offline batch policy."""
    return Export(
        engine="vllm",
        title=f"vLLM {VLLM_VERSION}'s offline request",
        signature="priority",
        features=_VLLM_FEATURES,
        template=_VLLM_TEMPLATE,
        load="put DIR on vLLM's import path, then create LLM(..., scheduling_policy='priority', "
        "scheduler_cls='$name.Scheduler')",
    )
