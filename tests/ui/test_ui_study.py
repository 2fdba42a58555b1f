"""A `crucible tune` run in the UI: its Study tab draws every trial on two objectives with the Pareto front
in colour, and lists the front (scored on eval) and the policy as configured."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit", reason="needs the ui extra (streamlit)")
from streamlit.testing.v1 import AppTest

from search import cli
from search.store.readmodel import ReadModel, StudyReport
from search.store.store import Store, open_engine

OBJECTIVES = ["--objective", "ttft_p99_ms", "--objective", "tpot_p99_ms"]
TUNE = ["tune", "--target", "batching", "--policy", "fcfs", "--set", "requests=0:40", "--set", "load=1.5"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, StudyReport]:
    """A real two-objective study of six trials in the process sandbox: (db URL, run id, its study)."""
    folder = tmp_path_factory.mktemp("tuned")
    url = f"sqlite:///{folder / 'runs.db'}"
    storage = ["--storage", f"sqlite:///{folder / 'study.db'}", "--sandbox", "process"]
    cli.main([*TUNE, *OBJECTIVES, "--trials", "6", "--seed", "1", "--db", url, *storage])
    read = ReadModel(Store(open_engine(url, create=False)))
    (run,) = read.runs()
    study = read.study(run.run_id)
    assert study is not None
    return url, run.run_id, study


def test_a_tune_run_has_a_study_tab_with_the_front_drawn(tuned, open_page) -> None:
    url, run_id, study = tuned
    at: AppTest = open_page(url, "views/run.py", run=run_id)
    assert [t.label for t in at.tabs][-1] == "Study"
    captions = "\n".join(c.value for c in at.caption)
    assert f"Optuna study `{study.study}` of fcfs: {len(study.points)} trials" in captions
    assert "ttft_p99_ms (minimize), tpot_p99_ms (minimize)" in captions
    assert at.selectbox(key="study-x").value == "ttft_p99_ms"
    assert at.selectbox(key="study-y").value == "tpot_p99_ms"
    charts = at.get("vega_lite_chart")
    spec = next(str(c.proto.spec) for c in charts if "tpot_p99_ms (train)" in str(c.proto.spec))
    assert "front" in spec and "dominated" in spec


def test_the_study_table_lists_the_configured_policy_then_the_front_best_first(tuned, open_page) -> None:
    url, run_id, study = tuned
    at: AppTest = open_page(url, "views/run.py", run=run_id)
    (table,) = [d.value for d in at.dataframe if "point" in d.value.columns]
    front = study.front()
    assert list(table["point"])[: 1 + len(front)] == ["as configured", *(f"trial {p.trial}" for p in front)]
    assert len(table) == 1 + len(study.points)
    assert table.loc[0, "ttft_p99_ms (eval)"] == pytest.approx(study.configured["ttft_p99_ms"])
    best = table.iloc[1]
    assert best["ttft_p99_ms (eval)"] == pytest.approx(front[0].eval["ttft_p99_ms"])
    assert best["ttft_p99_ms (train)"] == pytest.approx(front[0].train["ttft_p99_ms"])
    assert set(table["front"].iloc[1 : 1 + len(front)]) == {True}
    assert not table["front"].iloc[1 + len(front) :].any(), "dominated trials after the front"
