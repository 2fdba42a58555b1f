"""A baseline with a constant of its own (LFU-DA's clock) is fitted on the run's train instances as a
candidate is, never gated nor judged a duplicate; the other baselines run as written."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from in_process import InProcess
from test_steady_state import service

from sandbox.job import Job, Result
from search.proposers.evolve.proposer import EvolveProposer
from search.service import prepare


class Recording:
    """Runs every job in process and keeps it."""

    name = "recording"

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def run(self, job: Job) -> Result:
        self.jobs.append(job)
        return InProcess().run(job)


def test_a_target_s_tuned_baselines_fit_their_constants_on_the_train_part(tmp_path: Path) -> None:
    runs, sandbox = service(tmp_path, "tuned"), Recording()
    info = runs.record(prepare("kv", "gen:chat:1", {"capacity": 300}, budget=1, trials=4, workers=1, seed=0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        runs.execute(info.run_id, sandbox, EvolveProposer(), executor=pool)  # type: ignore[arg-type]
    by_source = {job.source: job for job in sandbox.jobs if job.source}
    baselines = {c.name: c for c in runs.read.candidates(info.run_id) if c.is_baseline}
    lfu_da = by_source[baselines["lfu_da"].source]
    assert lfu_da.tuning is not None and lfu_da.tuning.trials == 4
    assert (lfu_da.tuning.gate, lfu_da.tuning.seen) == (None, ())
    assert {"train", "eval"} <= {i.role for i in lfu_da.instances}
    assert all(by_source[c.source].tuning is None for name, c in baselines.items() if name != "lfu_da")
    assert set(baselines["lfu_da"].params) == {"clock_s"}
    assert baselines["lfu_da"].status == "evaluated"
