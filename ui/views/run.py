"""Run: live progress, leaderboard with filters, genealogy, islands, failures and proposers of one run; its
held-out tail, and a tune run's study with its Pareto front."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from search.service import (
    BASELINE,
    UNSEEN,
    CandidateInfo,
    EvaluationInfo,
    HoldoutReport,
    RunInfo,
    StudyReport,
)
from ui import charts, controls, data, frames, genealogy, nav, states

url = data.db_url()
st.title("Run")
runs = states.read(data.runs, url)
if not runs:
    states.no_runs(url)
    st.stop()
chosen = nav.choose_run(runs)
assert chosen is not None
live = chosen.status == "running"


def not_yet(message: str) -> None:
    """What is not there yet, and, on a live run's page, that it will appear without a reload."""
    st.info(message + (" This page refreshes itself." if live else ""))


def header(run: RunInfo) -> None:
    options = frames.options_text(run.options) or "-"
    st.caption(
        f"target **{run.target}** · workload `{run.workload}` · options {options}"
        f" · proposer {run.config.get('proposer', '-')} · created {run.created_at[:19].replace('T', ' ')}"
    )
    shown = f"**{run.status}**" + (f": {run.message}" if run.message else "")
    if run.status == "failed":
        st.error(f"The run failed: {run.message or 'no reason was recorded'}")
    elif run.status == "interrupted":
        st.warning("The run's process is gone (killed, or its machine went down); resume it to continue.")
    elif run.status == "stopped":
        st.info(f"Stopped: {run.message or 'no reason recorded'}. It can be resumed.")
    else:
        st.markdown(f"Status: {shown}")
    best = run.best.score if run.best else None
    base = run.best_baseline.score if run.best_baseline else None
    cols = st.columns(6 if run.oracle else 5)
    cols[0].metric("candidates", f"{run.done}/{run.budget}")
    cols[1].metric(
        f"best {run.objective}",
        "-" if best is None else f"{best:.4f}",
        delta=None if best is None or base is None else f"{best - base:+.4f} vs {run.best_baseline.name}",  # type: ignore[union-attr]
        delta_color="normal" if run.direction == "maximize" else "inverse",
    )
    cols[2].metric(
        "best baseline",
        "-" if base is None else f"{base:.4f}",
        run.best_baseline.name if run.best_baseline else None,
        delta_color="off",
    )
    cols[3].metric("tokens", f"{run.tokens:,}")
    cols[4].metric("cost", f"${run.cost_usd:.4f}")
    if run.oracle and run.oracle.score is not None:  # reads the future: the bound, not a baseline to beat
        cols[5].metric("oracle (bound)", f"{run.oracle.score:.4f}", run.oracle.name, delta_color="off")
    if run.best:
        st.page_link(
            nav.CANDIDATE,
            label=f"Open the best candidate ({run.best.label})",
            icon=":material/star:",
            query_params={"run": run.run_id, "candidate": str(run.best.candidate_id)},
        )


def progress_tab(run: RunInfo) -> None:
    maximize = run.direction == "maximize"
    frame = charts.progress_frame(states.read(data.progress, url, run.run_id), maximize)
    if frame.empty:
        not_yet("No candidate has finished yet.")
        return
    axis = st.radio(
        "Against", list(charts.AXES), format_func=charts.AXES.get, horizontal=True, key="run-axis"
    )
    base = [b for b in states.read(data.baselines, url, run.run_id) if b.score is not None]
    names = [b.name for b in base]
    drawn = st.multiselect("Baselines drawn as reference lines", names, default=names, key="run-baselines")
    chosen = [b for b in base if b.name in drawn]
    st.altair_chart(charts.progress_chart(frame, chosen, run.objective, axis), width="stretch")
    st.markdown("**Best per island**")
    st.altair_chart(charts.islands_chart(frame, run.objective, axis), width="stretch")


def leaderboard_tab(run: RunInfo, candidates: list[CandidateInfo]) -> None:
    options = frames.choices(candidates)
    cols = st.columns([1, 1, 2, 1, 2])
    verified_only = cols[0].toggle(
        "verified only", key="lb-verified", help="every hard property proved by Z3"
    )
    with_baselines = cols[1].toggle("baselines", value=True, key="lb-baselines")
    proposers = cols[2].multiselect("proposer / model", options.proposers, key="lb-proposers")
    islands = cols[3].multiselect("island", options.islands, key="lb-islands")
    statuses = cols[4].multiselect("status", options.statuses, key="lb-statuses")
    filters = frames.Filters(verified_only, tuple(proposers), tuple(islands), tuple(statuses), with_baselines)
    table = frames.leaderboard(candidates, filters, run.direction == "maximize")
    st.caption(f"{len(table)} of {len(candidates)} candidates · select a row to open it")
    if table.empty:
        st.info("No candidate matches these filters.")
        return
    picked = st.dataframe(
        table,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="leaderboard",
        column_config={
            "score": st.column_config.NumberColumn(format="%.4f"),
            "train": st.column_config.NumberColumn(format="%.4f"),
            "cost $": st.column_config.NumberColumn(format="$%.4f"),
        },
    )
    rows = picked.selection.rows if picked else []
    if rows:
        chosen_id = int(table.iloc[rows[0]]["id"])
        st.switch_page(nav.CANDIDATE, query_params={"run": run.run_id, "candidate": str(chosen_id)})


def genealogy_tab(run: RunInfo, candidates: list[CandidateInfo]) -> None:
    maximize = run.direction == "maximize"
    scored = sorted(
        (c for c in candidates if c.score is not None and not c.is_baseline),
        key=lambda c: c.score,
        reverse=maximize,
    )  # type: ignore[arg-type, return-value]
    whole = st.toggle("whole run", key="gen-whole", help="every candidate, not only the top ten's ancestry")
    top = len(scored)
    if len(scored) > 1:
        top = st.slider(
            "top candidates traced back", 1, len(scored), min(10, len(scored)), key="gen-top", disabled=whole
        )
    shown = (
        {c.candidate_id for c in candidates}
        if whole
        else genealogy.ancestry(candidates, [c.candidate_id for c in scored[:top]])
    )
    best_id = run.best.candidate_id if run.best else None
    if not shown:
        st.info("Nothing to trace yet: no candidate has a score.")
        return
    st.graphviz_chart(
        genealogy.dot(candidates, shown, best_id, lambda i: nav.candidate_link(run.run_id, i)),
        width="content",
    )
    st.caption("Solid: parent; dashed: inspiration; gold: the best. Click a node to open the candidate, or:")
    kept = [c for c in candidates if c.candidate_id in shown]
    picked = nav.choose_candidate(kept, "Open candidate", "candidate", best_id, key="gen-open")
    if picked is not None and st.button("Open", key="gen-open-button"):
        st.switch_page(nav.CANDIDATE, query_params={"run": run.run_id, "candidate": str(picked.candidate_id)})


def islands_tab(run: RunInfo, candidates: list[CandidateInfo]) -> None:
    table = frames.islands_frame(candidates, run.direction == "maximize")
    st.dataframe(table, hide_index=True, column_config={"best": st.column_config.NumberColumn(format="%.4f")})
    cells = pd.DataFrame([{"island": c.island, "status": c.status} for c in candidates if not c.is_baseline])
    if not cells.empty:
        counts = cells.value_counts().rename("candidates").reset_index()
        st.altair_chart(charts.island_map(counts), width="stretch")


def failures_tab(run: RunInfo) -> None:
    st.markdown("**Where the budget went**")
    st.dataframe(frames.budget_frame(states.read(data.budget, url, run.run_id)), hide_index=True)
    failures = states.read(data.failures, url, run.run_id)
    if not failures:
        st.success("No proposed candidate failed.")
        return
    st.altair_chart(charts.failures_chart(failures), width="stretch")
    st.dataframe(
        pd.DataFrame(
            [{"class": k, "candidates": v} for k, v in sorted(failures.items(), key=lambda kv: -kv[1])]
        ),
        hide_index=True,
    )


def proposers_tab(run: RunInfo) -> None:
    stats = states.read(data.proposer_stats, url, run.run_id)
    if not stats:
        st.info("No proposal yet.")
        return
    st.dataframe(
        frames.proposers_frame(stats),
        hide_index=True,
        column_config={
            "success": st.column_config.NumberColumn(format="percent"),
            "best": st.column_config.NumberColumn(format="%.4f"),
            "cost $": st.column_config.NumberColumn(format="$%.4f"),
        },
    )
    events = states.read(data.events, url, run.run_id)
    with st.expander(f"events ({len(events)})"):
        st.dataframe(pd.DataFrame([e.to_json() for e in events]), hide_index=True)


def holdout_tab(report: HoldoutReport) -> None:
    warm = ", and meet the state the head left (it is replayed before them, uncounted)" if report.warm else ""
    selected = (
        f"Tuned on the first part of requests {report.head} and selected on the rest of them"
        if report.select == UNSEEN
        else f"Tuned and selected on requests {report.head}"
    )
    st.caption(
        f"{selected}; requests {report.tail}"
        f" (the last {report.share:.0%}) were never seen by the search{warm}."
        " Re-tuned: the constants tuned again on the tail (built-in baselines have none)."
    )
    if not report.rows:
        not_yet("The tail is scored when the search ends.")
        return
    figures_table(frames.holdout_frame(report), ("policy", "kind"))


def figures_table(table: pd.DataFrame, labels: tuple[str, ...]) -> None:
    """A table whose columns, but the `labels`, are figures: four decimals each."""
    number = st.column_config.NumberColumn(format="%.4f")
    st.dataframe(table, hide_index=True, column_config={c: number for c in table.columns if c not in labels})


def study_tab(report: StudyReport) -> None:
    goals = ", ".join(f"{m} ({d})" for m, d in report.objectives.items())
    failed = f"; {report.failed} trials failed without a value" if report.failed else ""
    st.caption(
        f"Optuna study `{report.study}` of {report.policy}: {len(report.points)} trials with values on the"
        f" train instances{failed}. Objectives: {goals}. The front (no trial at least as good on every"
        " objective and better on one) was scored on the eval instances."
    )
    if not report.points:
        not_yet("No trial has finished yet.")
        return
    metrics = list(report.objectives)
    if len(metrics) > 1:
        cols = st.columns(2)
        x = cols[0].selectbox("x axis", metrics, index=0, key="study-x")
        y = cols[1].selectbox("y axis", [m for m in metrics if m != x], index=0, key="study-y")
        st.altair_chart(charts.pareto_chart(report, x, y), width="stretch")
    table = frames.study_frame(report)
    knobs = tuple(c for c in table.columns if not c.endswith(("(train)", "(eval)")))
    figures_table(table, knobs)


def timelines(run: RunInfo, candidates: list[CandidateInfo]) -> dict[str, EvaluationInfo]:
    """The best candidate's and the best baseline's evaluations on the first eval instance, where the target
    keeps figures over time (a serving fleet's queues and hit rates); empty otherwise."""
    maximize = run.direction == "maximize"

    def first(evaluations: list[EvaluationInfo]) -> EvaluationInfo | None:
        return next((e for e in evaluations if e.role == "eval" and e.timelines), None)

    found = [c for c in candidates if c.proposer != BASELINE and c.score is not None and first(c.evaluations)]
    base = [b for b in states.read(data.baselines, url, run.run_id) if b.score is not None and not b.oracle]
    base = [b for b in base if first(b.evaluations)]
    if not found or not base:
        return {}
    best = max(found, key=lambda c: c.score if maximize else -c.score)  # type: ignore[operator]
    rival = max(base, key=lambda b: b.score if maximize else -b.score)  # type: ignore[operator]
    mine, theirs = first(best.evaluations), first(rival.evaluations)
    assert mine is not None and theirs is not None
    return {f"found {best.label}": mine, f"best baseline: {rival.name}": theirs}


def timelines_tab(shown: dict[str, EvaluationInfo]) -> None:
    instance = next(iter(shown.values())).instance
    st.caption(f"On {instance}: each instance's waiting requests and recent prefix hit rate over the window.")
    st.altair_chart(charts.timeline_chart(frames.timeline_frame(shown)), width="content")


def page() -> None:
    run = states.read(data.run, url, chosen.run_id)
    if live and run.status != "running":
        st.rerun()  # the run ended: redraw once, without the refresh
    header(run)
    controls.run_controls(url, run)
    candidates = states.read(data.candidates, url, run.run_id)
    names = ["Progress", "Leaderboard", "Genealogy", "Islands", "Failures", "Proposers"]
    held_out = states.read(data.holdout, url, run.run_id)  # None for a run without --holdout
    study = states.read(data.study, url, run.run_id)  # None for a run not made by crucible tune
    over_time = timelines(run, candidates)
    extra = ["Held-out tail"] * (held_out is not None) + ["Study"] * (study is not None)
    extra += ["Over time"] * bool(over_time)
    tabs = st.tabs(names + extra)
    with tabs[0]:
        progress_tab(run)
    with tabs[1]:
        leaderboard_tab(run, candidates)
    with tabs[2]:
        genealogy_tab(run, candidates)
    with tabs[3]:
        islands_tab(run, candidates)
    with tabs[4]:
        failures_tab(run)
    with tabs[5]:
        proposers_tab(run)
    if held_out is not None:
        with tabs[names.index("Proposers") + 1]:
            holdout_tab(held_out)
    if study is not None:
        with tabs[names.index("Proposers") + 1 + (held_out is not None)]:
            study_tab(study)
    if over_time:
        with tabs[-1]:
            timelines_tab(over_time)


st.fragment(page, run_every=nav.REFRESH_S if live else None)()
