"""A search on a Dask cluster: jobs run on the workers, in each one's own sandbox; a worker killed mid-job
costs nothing; a scheduler that cannot be reached is one line before anything is stored."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import in_worker
import pytest
from distributed import Client, LocalCluster
from in_worker import InWorker

from sandbox.process import ProcessSandbox
from search.cli.main import main
from search.executors.cluster import RESOURCE, HostSandbox, _sandbox_here, connect
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine

CONFIG = prepare("kv", "gen:chat:1", {"capacity": 300}, budget=4, trials=2, workers=2, seed=11)
cloudpickle.register_pickle_by_value(in_worker)  # the workers cannot import this tests folder


def service(tmp_path: Path, name: str) -> RunService:
    return RunService(Store(open_engine(f"sqlite:///{tmp_path / name}.db")))


def leaderboard(runs: RunService, run_id: str) -> list[tuple]:
    return [(c.seq, c.source, c.status, c.score, c.params) for c in runs.read.candidates(run_id)]


def kill_a_worker_mid_job(client: Client, runs: RunService, run_id: str) -> str:
    """SIGKILL the process of a worker that is running a candidate's job, once a candidate has finished."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        finished = [c for c in runs.read.candidates(run_id) if not c.is_baseline and c.status != "pending"]
        busy = [worker for worker, tasks in client.processing().items() if tasks]
        if finished and busy:
            pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            return busy[0]
        time.sleep(0.05)
    raise AssertionError("no worker was ever busy with a candidate's job")


def test_a_worker_killed_mid_job_loses_nothing_doubles_nothing_and_changes_nothing(tmp_path: Path) -> None:
    unbroken = service(tmp_path, "unbroken")
    whole = unbroken.record(CONFIG).run_id
    with ThreadPoolExecutor(max_workers=2) as pool:
        unbroken.execute(whole, InWorker(), EvolveProposer(), executor=pool)

    runs = service(tmp_path, "cluster")
    run_id = runs.record(CONFIG).run_id
    failures: list[BaseException] = []
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        resources={RESOURCE: 1},
    )
    with cluster, connect(cluster.scheduler_address) as executor:

        def execute() -> None:
            try:
                runs.execute(run_id, InWorker(), EvolveProposer(), executor=executor)
            except BaseException as exc:
                failures.append(exc)

        search = threading.Thread(target=execute)
        search.start()
        killed = kill_a_worker_mid_job(executor.client, runs, run_id)
        search.join(timeout=180)
        assert not search.is_alive() and not failures, failures
        assert killed not in executor.client.scheduler_info()["workers"], "the killed worker is gone"

    assert runs.read.run(run_id).status == "finished"
    assert leaderboard(runs, run_id) == leaderboard(unbroken, whole), "the same run as without the failure"
    stored = runs.store.evaluations(run_id)
    assert len(stored) == len(unbroken.store.evaluations(whole)), "each job recorded once"
    assert f"pid {os.getpid()}" not in {e.backend for e in stored}, "every job ran on a worker"


def test_a_job_travels_as_the_backend_s_name_and_runs_in_the_sandbox_of_the_host_it_lands_on() -> None:
    travelling = pickle.loads(pickle.dumps(HostSandbox("process")))
    assert travelling == HostSandbox("process")
    assert isinstance(_sandbox_here("process"), ProcessSandbox)
    assert _sandbox_here("process") is _sandbox_here("process"), "chosen once per worker process"


def test_an_unreachable_scheduler_is_one_line_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    for address, reason in {
        "tcp://127.0.0.1:9": "[Errno 111] Connection refused",
        "udp://127.0.0.1:9": "expected tcp://HOST:PORT, got the scheme 'udp'",
    }.items():
        with pytest.raises(SystemExit) as ended:
            main(["search", "--workload", "gen:chat:1", "--cluster", address, "--db", f"sqlite:///{db}"])
        assert ended.value.code == 2
        line = f"crucible: error: cannot reach the Dask scheduler at {address}: {reason}"
        assert capsys.readouterr().err.splitlines() == [line]
    assert not db.exists()


def test_a_cluster_without_sandbox_slots_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = LocalCluster(
        n_workers=0, processes=True, protocol="tcp://", host="127.0.0.1", dashboard_address=None
    )
    with cluster:
        address = cluster.scheduler_address
        with pytest.raises(SystemExit) as ended:
            main(
                [
                    "search",
                    "--workload",
                    "gen:chat:1",
                    "--cluster",
                    address,
                    "--db",
                    f"sqlite:///{tmp_path}/r.db",
                ]
            )
    assert ended.value.code == 2
    hint = f"start workers with: dask worker {address} --resources sandbox=1"
    assert capsys.readouterr().err.strip().endswith(hint)
