"""`--select`: what a search ranks its candidates on. `window`: the target's eval instances (the whole
window); `unseen`: the window after the train share the constants were tuned on, replayed warm. A run that
holds out a tail ranks on `unseen` unless told otherwise, and so does one of a target that asks for it
(batching-capacity); any other, on its window."""

from __future__ import annotations

from pathlib import Path

import pytest
from in_process import InProcess

import targets
from search.cli.main import main
from search.errors import UserError
from search.loop.selection import run_instances
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.settings import RunConfig
from search.store.store import Store, open_engine
from search.terms import UNSEEN, WHOLE
from targets.kv.target import shipped_workload_path

KV = targets.load("kv")
WORKLOAD = str(shipped_workload_path())
OPTIONS = {"capacity": 300, "requests": "0:300"}


def test_window_ranks_on_the_targets_own_instances() -> None:
    assert run_instances(KV, WORKLOAD, OPTIONS, WHOLE) == KV.instances(WORKLOAD, OPTIONS)


def test_a_run_ranks_on_unseen_by_default_only_when_it_holds_out_a_tail() -> None:
    assert prepare("kv", None, OPTIONS, budget=2).select == WHOLE
    assert prepare("kv", None, OPTIONS, budget=2, holdout=0.33).select == UNSEEN
    assert prepare("kv", None, OPTIONS, budget=2, holdout=0.33, select=WHOLE).select == WHOLE
    stored = prepare("kv", None, OPTIONS, budget=2, holdout=0.33).to_json()
    del stored["select"]
    assert RunConfig.from_json(stored).select == WHOLE, "a run stored before the default resumes as it ran"


def test_a_target_that_asks_for_it_ranks_on_unseen_without_a_holdout() -> None:
    assert targets.load("batching-capacity").ranks_unseen() and not targets.load("batching").ranks_unseen()
    assert prepare("batching-capacity", None, {}, budget=2).select == UNSEEN
    assert prepare("batching-capacity", None, {}, budget=2, select=WHOLE).select == WHOLE
    assert prepare("batching", None, {}, budget=2).select == WHOLE


def test_unseen_ranks_on_the_window_after_the_train_share_replayed_warm() -> None:
    train, scored = run_instances(KV, WORKLOAD, OPTIONS, UNSEEN)
    assert (train.role, scored.role) == ("train", "eval")
    assert train == KV.instances(WORKLOAD, OPTIONS)[0], "tuning is unchanged"
    assert train.config["requests"] == [0, 90], "the default train share: 30 % of 300"
    assert scored.config["requests"] == [90, 300] and scored.config["warm"] is True
    whole = KV.instances(WORKLOAD, {**OPTIONS, "requests": "90:300", "warm": True})[1]
    assert scored == whole, "the target's own eval instance of that window"


def test_a_target_without_warm_replays_ranks_on_that_window_cold() -> None:
    batching = targets.load("batching")
    workload, window = str(batching.default_config()["workload"]), {"requests": "0:100"}
    train, scored = run_instances(batching, workload, window, UNSEEN)
    assert train.config["requests"] == [0, 30] and scored.config["requests"] == [30, 100]
    assert "warm" not in scored.config, "batching's held-out tail starts from an empty server too"


def test_a_target_without_a_request_window_or_a_bad_choice_is_one_line() -> None:
    with pytest.raises(UserError, match="target dit has no request window to rank on"):
        run_instances(targets.load("dit"), "gen:images:0", {}, UNSEEN)
    with pytest.raises(UserError, match="--select must be one of window, unseen"):
        run_instances(KV, WORKLOAD, OPTIONS, "tail")


def test_a_search_holding_out_a_tail_scores_candidates_and_baselines_on_the_unseen_part(
    tmp_path: Path,
) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    config = prepare("kv", None, OPTIONS, budget=2, trials=2, workers=1, holdout=0.33)
    info = runs.record(config)
    runs.execute(info.run_id, InProcess(), EvolveProposer())
    read = runs.read
    assert read.run(info.run_id).config["select"] == UNSEEN
    head_cut = int(201 * 0.3)  # the head is 0:201 once the last 99 of 300 are held out
    scored = {e.instance for c in read.candidates(info.run_id) for e in c.evaluations if e.role == "eval"}
    assert scored == {f"{Path(WORKLOAD).name}@300[{head_cut}:201] warm"}
    for baseline in read.baselines(info.run_id):
        assert {e.instance for e in baseline.evaluations if e.role == "eval"} == scored, baseline.name
    report = read.holdout(info.run_id)
    assert report is not None and report.select == UNSEEN
    assert report.head_label() == "head 0:201, unseen part"


def test_a_run_ranked_on_unseen_without_a_tail_says_so_in_its_verdict(tmp_path: Path) -> None:
    runs = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'runs.db'}")))
    info = runs.record(prepare("kv", None, OPTIONS, budget=2, trials=2, workers=1, select=UNSEEN))
    runs.execute(info.run_id, InProcess(), EvolveProposer())
    judged = runs.read.report(info.run_id).judgement()
    assert judged is not None and judged.on == "the requests after the train share"


def test_the_flag_is_checked_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    argv = [
        "search",
        "--target",
        "dit",
        "--select",
        "unseen",
        "--budget",
        "1",
        "--db",
        f"sqlite:///{db}",
    ]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code != 0
    assert "has no request window to rank on" in capsys.readouterr().err
    assert not db.exists()
