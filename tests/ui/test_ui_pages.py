"""Every page of the web UI against a store seeded by real searches: the right rows, numbers and verdicts,
filters that change them, helpful empty states, and no exception."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit", reason="needs the ui extra (streamlit)")
import pandas as pd
from seeded_store import KEY_ENV, SEARCH, Seeded
from streamlit.testing.v1 import AppTest

from sandbox.process import ProcessSandbox
from search.errors import UserError
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService
from search.store.store import Store, open_engine


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    parts += [e.value for e in at.info] + [e.value for e in at.warning] + [e.value for e in at.error]
    return "\n".join(str(p) for p in parts)


def buttons(at: AppTest) -> set[str]:
    return {b.key for b in at.button if b.key}


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_runs_lists_every_run_with_its_status_progress_and_best(seeded: Seeded, open_page) -> None:
    at = open_page(seeded.url)
    table = at.dataframe[0].value
    assert list(table["run"]) == [seeded.stopped.run_id, seeded.finished.run_id]  # newest first
    row = table.set_index("run").loc[seeded.finished.run_id]
    assert row["status"] == "finished"
    assert row["done"] == "6/6"
    assert row["best"] == pytest.approx(seeded.finished.best.score)
    assert row["vs baseline"] == pytest.approx(
        seeded.finished.best.score - seeded.finished.best_baseline.score
    )
    assert table.set_index("run").loc[seeded.stopped.run_id, "status"] == "stopped"
    assert at.multiselect(key="compare-runs").value == [seeded.stopped.run_id, seeded.finished.run_id]
    assert at.get("vega_lite_chart"), "the runs' comparison chart"


def test_runs_compares_against_cost_as_well(seeded: Seeded, open_page) -> None:
    at = open_page(seeded.url)
    at.radio(key="runs-axis").set_value("cost_so_far").run()
    assert not at.exception
    assert at.get("vega_lite_chart")


def test_a_store_that_does_not_exist_says_how_to_start_one(missing_db: str, open_page) -> None:
    at = open_page(missing_db)
    assert "No database at" in texts(at)
    assert f"crucible search --target kv --budget 60 --db {missing_db}" in texts(at)
    assert not at.dataframe


def test_an_empty_store_says_how_to_start_a_run(missing_db: str, open_page) -> None:
    open_engine(missing_db)  # created, no run in it
    for page in ("views/runs.py", "views/run.py", "views/candidate.py", "views/compare.py"):
        at = open_page(missing_db, page)
        assert "No runs in this store yet" in texts(at), page


def test_a_store_that_cannot_be_opened_is_one_error(tmp_path, open_page) -> None:
    bad = tmp_path / "not-a-database.db"
    bad.write_text("this is not SQLite")
    at = open_page(f"sqlite:///{bad}")
    assert len(at.error) == 1 and "Cannot read the store" in at.error[0].value


def test_run_shows_progress_against_the_baselines(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    shown = metrics(at)
    assert shown["candidates"] == "6/6"
    assert shown[f"best {run.objective}"] == f"{run.best.score:.4f}"
    assert shown["best baseline"] == f"{run.best_baseline.score:.4f}" and run.best_baseline.name != "belady"
    assert shown["oracle (bound)"] == f"{run.oracle.score:.4f}", "Belady reads the future: the bound"
    assert len(at.get("vega_lite_chart")) >= 3  # progress, per island, island map
    assert at.get("graphviz_chart")
    assert not {"stop", "resume"} & buttons(at), "a finished run is neither running nor resumable"


def test_run_shows_the_held_out_tail_as_the_run_service_scored_it(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    report = seeded.read.holdout(run.run_id)
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    assert [t.label for t in at.tabs][-1] == "Held-out tail"
    assert f"requests {report.tail} (the last 33%) were never seen by the search" in texts(at)
    (table,) = [d.value.set_index("policy") for d in at.dataframe if "tail re-tuned" in d.value.columns]
    assert list(table.index) == [r.name for r in report.rows]
    found = report.rows[0]
    assert found.kind == "found" and table.loc[found.name, f"tail {report.tail}"] == pytest.approx(found.tail)
    assert table.loc[found.name, "tail re-tuned"] == pytest.approx(found.tail_retuned)
    for row in report.rows:
        assert table.loc[row.name, "found / this, tail"] == pytest.approx(found.tail / row.tail)
    builtin = next(r for r in report.rows if r.kind == "builtin")
    assert pd.isna(table.loc[builtin.name, "tail re-tuned"]), "a built-in baseline has no constants"


def test_a_run_without_a_holdout_has_no_tail_tab(seeded: Seeded, open_page) -> None:
    at = open_page(seeded.url, "views/run.py", run=seeded.stopped.run_id)
    assert "Held-out tail" not in [t.label for t in at.tabs]
    assert "Study" not in [t.label for t in at.tabs], "a search, not a crucible tune study"


def test_run_leaderboard_filters_change_the_rows(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    candidates = seeded.read.candidates(run.run_id)
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    board = at.dataframe(key="leaderboard").value
    assert len(board) == len(candidates)
    assert board["score"].iloc[0] == pytest.approx(max(c.score for c in candidates if c.score is not None))

    at.toggle(key="lb-baselines").set_value(False).run()
    board = at.dataframe(key="leaderboard").value
    assert len(board) == sum(not c.is_baseline for c in candidates)

    island = candidates[-1].island
    at.multiselect(key="lb-islands").set_value([island]).run()
    board = at.dataframe(key="leaderboard").value
    assert set(board["island"]) == {island}
    assert len(board) == sum(not c.is_baseline and c.island == island for c in candidates)

    at.multiselect(key="lb-islands").set_value([]).run()
    at.multiselect(key="lb-statuses").set_value(["evaluated"]).run()
    board = at.dataframe(key="leaderboard").value
    assert set(board["status"]) == {"evaluated"}

    at.toggle(key="lb-verified").set_value(True).run()
    board = at.dataframe(key="leaderboard").value
    assert all(board["verified"])


def test_run_that_was_stopped_offers_resume_and_shows_its_spend(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    assert run.message.startswith("token cap reached")
    assert f"Stopped: {run.message}" in texts(at)
    assert "resume" in buttons(at)
    assert f"crucible search --resume {run.run_id} --db {seeded.url}" in texts(at)
    assert metrics(at)["tokens"] == f"{run.tokens:,}" and run.tokens > 0
    assert metrics(at)["cost"] == f"${run.cost_usd:.4f}" and run.cost_usd > 0


def test_run_failures_by_class_and_the_per_proposer_table(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    failures = seeded.read.failures(run.run_id)
    assert failures.get("rejected: no-imports") == 1, "the scripted reply outside the subset"
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    shown = next(t.value for t in at.dataframe if list(t.value.columns) == ["class", "candidates"])
    assert dict(zip(shown["class"], shown["candidates"], strict=True)) == failures
    stats = seeded.read.proposer_stats(run.run_id)
    table = next(t.value for t in at.dataframe if "proposals" in t.value.columns)
    assert list(table["proposer"]) == [s.proposer for s in stats] == ["llm"]
    assert list(table["model"]) == ["scripted"]
    assert list(table["tokens"]) == [s.tokens for s in stats]
    assert list(table["rejected"]) == [s.rejected for s in stats]


def test_run_shows_where_the_budget_went_as_the_read_model_counts_it(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    budget = seeded.read.budget(run.run_id)
    assert budget.static == 1 and budget.refuted == 1, "the scripted replies outside the subset and refuted"
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    shown = next(t.value for t in at.dataframe if list(t.value.columns) == ["stage", "count"])
    stages = dict(zip(shown["stage"], shown["count"], strict=True))
    assert stages["rejected by the static check"] == 1
    assert stages["refuted by the verifier"] == 1
    assert stages["evaluated"] == budget.evaluated
    assert sum(stages.values()) == sum(budget.to_json().values())


def test_leaderboard_filters_by_proposer_and_model(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    at.multiselect(key="lb-proposers").set_value(["llm/scripted"]).run()
    board = at.dataframe(key="leaderboard").value
    proposed = [c for c in seeded.read.candidates(run.run_id) if not c.is_baseline]
    assert set(board["proposer"]) == {"llm/scripted"} and len(board) == len(proposed)


def test_candidate_the_static_check_rejected(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    rejected = next(
        c for c in seeded.read.candidates(run.run_id) if c.failure_class == "rejected: no-imports"
    )
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id, candidate=str(rejected.candidate_id))
    assert at.error[0].value == f"rejected: no-imports: {rejected.message}"
    assert "replies: static-check" in texts(at) and " tokens in, " in texts(at), "how it was proposed"
    assert "Not verified: the static check stopped it before Z3 ran." in texts(at)
    assert "It never reached the sandbox (rejected: no-imports)." in texts(at)
    assert not at.get("download_button"), "no heuristic file for a candidate that never ran"


def test_candidate_verdicts_are_the_stored_ones_with_their_counterexamples(seeded: Seeded, open_page) -> None:
    run = seeded.stopped
    refuted = next(c for c in seeded.read.candidates(run.run_id) if c.source.startswith('"""Age per hit.'))
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id, candidate=str(refuted.candidate_id))
    table = at.dataframe[0].value
    assert list(zip(table["property"], table["verdict"], strict=True)) == [
        (v.property, v.verdict) for v in refuted.verdicts
    ]
    found = [v.counterexample for v in refuted.verdicts if v.counterexample]
    assert [json.loads(j.value) for j in at.json] == found, "each counterexample Z3 found, as stored"


def test_candidate_shows_code_verdicts_params_and_metrics(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    best = seeded.read.candidate(run.run_id, run.best.candidate_id)
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id)  # the best by default
    assert at.code[0].value.strip() == best.source.strip()
    verdicts = at.dataframe[0].value
    assert list(verdicts["property"]) == [v.property for v in best.verdicts]
    assert list(verdicts["verdict"]) == [v.verdict for v in best.verdicts]
    params = at.dataframe[1].value
    assert dict(zip(params["param"], params["value"], strict=True)) == pytest.approx(best.params)
    assert metrics(at)[f"{run.objective} (eval)"] == f"{best.score:.4f}"
    assert at.get("download_button")
    assert at.get("vega_lite_chart"), "metrics per instance against the baselines"
    table = at.dataframe[2].value
    eval_row = table.xs("eval", level="role").iloc[0]
    for baseline in seeded.read.baselines(run.run_id):
        assert eval_row[baseline.name] == pytest.approx(baseline.score)


def test_candidate_diff_against_its_parent(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    child = next(c for c in seeded.read.candidates(run.run_id) if c.parent_id is not None)
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id, candidate=str(child.candidate_id))
    diff = at.code[1].value
    assert diff.startswith("---") or "only the tuned constants differ" in diff


def test_compare_a_candidate_with_a_baseline_and_another_candidate(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    best = seeded.read.candidate(run.run_id, run.best.candidate_id)
    at = open_page(seeded.url, "views/compare.py", run=run.run_id)
    at.selectbox(key="right-baseline").set_value("lru").run()
    table = at.dataframe[0].value
    lru = next(b for b in seeded.read.baselines(run.run_id) if b.name == "lru")
    row = table[(table["metric"] == run.objective) & (table["role"] == "eval")].iloc[0]
    assert row.iloc[3] == pytest.approx(best.score)
    assert row["lru"] == pytest.approx(lru.score)
    assert row["right - left"] == pytest.approx(lru.score - best.score)

    at.radio(key="right-kind").set_value("candidate").run()
    assert not at.exception
    assert at.dataframe[0].value.shape[0] >= 1


def test_launch_form_is_generated_from_options_settings_and_proposers(seeded: Seeded, open_page) -> None:
    from search import proposers
    from search.service import SETTINGS
    from search.service.runs import load_target

    at = open_page(seeded.url, "views/launch.py")
    at.selectbox(key="launch-target").set_value("kv").run()
    labels = {w.label for w in [*at.number_input, *at.text_input, *at.selectbox, *at.checkbox]}
    for option in load_target("kv").options:
        assert f"{option.name} ({option.type})" in labels
    assert {s.name for s in SETTINGS} - {"proposer"} <= labels, "every run setting, at its one default"
    assert at.number_input(key="setting-budget").value == 300
    assert at.selectbox(key="setting-select").options == ["default", "window", "unseen"]
    assert at.selectbox(key="setting-select").value is None, "the split's default: unseen with a holdout"
    assert at.number_input(key="setting-holdout").value is None, "no holdout unless asked"
    assert at.selectbox(key="proposer").options == list(proposers.names())
    at.selectbox(key="proposer").set_value("llm").run()
    shown = {w.label for w in [*at.text_input, *at.number_input]}
    assert {s.name for s in proposers.load("llm").settings} <= shown


def test_launch_checks_the_holdout_and_where_to_rank_before_starting(tmp_path, open_page) -> None:
    url = f"sqlite:///{tmp_path / 'launch.db'}"
    at = open_page(url, "views/launch.py")
    at.selectbox(key="launch-target").set_value("dit").run()
    at.selectbox(key="setting-select").set_value("unseen")
    at.button[0].click().run(timeout=90)
    assert len(at.error) == 1 and "has no request window to rank on" in at.error[0].value
    assert not Store(open_engine(url)).runs(), "nothing stored"


def test_launch_with_an_unreachable_endpoint_is_one_line(tmp_path, open_page, monkeypatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TEST_KEY", "sk-test")
    url = f"sqlite:///{tmp_path / 'launch.db'}"
    at = open_page(url, "views/launch.py")
    at.selectbox(key="proposer").set_value("llm").run()
    at.text_input(key="setting-models").set_value("some-model")
    at.text_input(key="setting-base_url").set_value("http://127.0.0.1:9/v1")
    at.text_input(key="setting-api_key_env").set_value("CRUCIBLE_TEST_KEY")
    at.button[0].click().run(timeout=90)
    assert len(at.error) == 1
    assert at.error[0].value.startswith("The search did not start: ")
    assert "\n" not in at.error[0].value
    assert not Store(open_engine(url)).runs(), "nothing stored"


def test_resume_whose_endpoint_is_gone_says_why_in_one_line(seeded: Seeded, open_page, monkeypatch) -> None:
    run = seeded.stopped  # its scripted endpoint closed when the seeding search ended
    monkeypatch.setenv(KEY_ENV, "sk-scripted")
    at = open_page(seeded.url, "views/run.py", run=run.run_id)
    at.button(key="resume").click().run(timeout=120)
    assert len(at.error) == 1
    assert at.error[0].value.startswith("The run could not be resumed: cannot reach the LLM endpoint")
    after = seeded.read.run(run.run_id)
    assert (after.status, after.resumable, after.done) == ("stopped", True, run.done)


def test_a_failed_run_says_why(tmp_path, open_page) -> None:
    url = f"sqlite:///{tmp_path / 'failed.db'}"
    service = RunService(Store(open_engine(url)))
    info = service.create(
        "kv", None, {}, budget=2, trials=2, limits={"wall_s": 0.05}
    )  # baselines cannot finish
    with pytest.raises(UserError):
        service.execute(info.run_id, ProcessSandbox(), EvolveProposer())
    failed = service.read.run(info.run_id)
    assert failed.status == "failed" and failed.message
    at = open_page(url, "views/run.py", run=failed.run_id)
    assert at.error[0].value == f"The run failed: {failed.message}"
    assert not {"stop", "resume"} & buttons(at)
    at = open_page(url)
    assert list(at.dataframe[0].value["status"]) == ["failed"]


def test_candidate_shows_its_optuna_study_history_and_parameter_importance(seeded: Seeded, open_page) -> None:
    run = seeded.finished
    tuned = [c for c in seeded.read.candidates(run.run_id) if c.status == "evaluated" and c.params]
    assert all(len(c.trials) == int(SEARCH[SEARCH.index("--trials") + 1]) for c in tuned)
    spread = next(c for c in tuned if len({t["value"] for t in c.trials}) > 1)
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id, candidate=str(spread.candidate_id))
    assert not at.exception
    assert f"**Optimization history** ({len(spread.trials)} trials)" in texts(at)
    specs = [json.dumps(json.loads(chart.proto.spec)) for chart in at.get("vega_lite_chart")]
    assert any('"best_so_far"' in spec and '"trial"' in spec for spec in specs), "the optimization history"
    assert any("importance (PED-ANOVA)" in spec for spec in specs), "the parameter importance"
    # Trials that all scored the same cannot rank the constants: one line says so, and no bars.
    tied = next(c for c in tuned if len({t["value"] for t in c.trials}) == 1)
    at = open_page(seeded.url, "views/candidate.py", run=run.run_id, candidate=str(tied.candidate_id))
    assert not at.exception
    assert "No parameter importance: its best trials do not differ from the rest" in texts(at)
    assert not any("PED-ANOVA" in chart.proto.spec for chart in at.get("vega_lite_chart"))
