"""Candidate: its code and diff against its parent, verdicts with counterexamples, tuned PARAMS, metrics
per instance against every baseline, the sandbox's outcome, its cost, and the heuristic file to ship."""

from __future__ import annotations

import difflib

import pandas as pd
import streamlit as st

from search.errors import UserError
from search.service import CandidateInfo, NoImportance, RunInfo
from ui import charts, data, frames, nav, states

url = data.db_url()
st.title("Candidate")
runs = states.read(data.runs, url)
if not runs:
    states.no_runs(url)
    st.stop()
run = nav.choose_run(runs)
assert run is not None
candidates = states.read(data.candidates, url, run.run_id)
by_id = {c.candidate_id: c for c in candidates}
default = run.best.candidate_id if run.best else None
candidate = nav.choose_candidate(candidates, "Candidate", "candidate", default, key="candidate")
if candidate is None:
    st.info("This run has no candidate yet: its baselines are being evaluated.")
    st.stop()


def link(c: CandidateInfo) -> None:
    st.page_link(
        nav.CANDIDATE,
        label=frames.candidate_label(c),
        query_params={"run": run.run_id, "candidate": str(c.candidate_id)},
    )


def header(c: CandidateInfo) -> None:
    kind = "baseline" if c.is_baseline else f"{c.proposer}" + (f" / {c.model}" if c.model else "")
    st.subheader(frames.candidate_label(c))
    best = " · **the run's best**" if run.best and run.best.candidate_id == c.candidate_id else ""
    st.markdown(f"**{c.status}** · {kind} · island {c.island} · candidate id {c.candidate_id}{best}")
    if c.failure_class:
        st.error(f"{c.failure_class}: {c.message}" if c.message else c.failure_class)
    elif c.message:
        st.caption(c.message)
    if c.note:
        st.caption(f"proposer's note: {c.note}")
    if c.proposal:
        st.caption(frames.proposal_line(c.proposal))
    cols = st.columns(5)
    cols[0].metric(f"{run.objective} (eval)", "-" if c.score is None else f"{c.score:.4f}")
    cols[1].metric(f"{run.objective} (train)", "-" if c.train_score is None else f"{c.train_score:.4f}")
    cols[2].metric("verified", "yes" if frames.verified(c) else "no")
    cols[3].metric("tokens", f"{c.tokens:,}")
    cols[4].metric("cost", f"${c.cost_usd:.4f}")
    ancestors = [by_id[i] for i in (c.parent_id, *c.inspirations) if i is not None and i in by_id]
    if ancestors:
        st.markdown("Parent and inspirations:")
        cols = st.columns(len(ancestors))
        for col, a in zip(cols, ancestors, strict=True):
            with col:
                link(a)


def code_tab(c: CandidateInfo) -> None:
    st.code(c.source, language="python", line_numbers=True, wrap_lines=True)
    if c.status not in ("evaluated", "gated"):
        return
    try:
        text = data.heuristic_file(url, run.run_id, c.candidate_id)
    except UserError as exc:
        st.caption(f"No heuristic file: {exc}")
        return
    st.download_button(
        "Download the heuristic file",
        text,
        file_name=f"{run.target}-{run.run_id}-{c.seq if not c.is_baseline else c.name}.py",
        mime="text/x-python",
        icon=":material/download:",
        help="self-contained: the source with its tuned PARAMS as defaults (as `crucible runs best` writes)",
    )


def diff_tab(c: CandidateInfo) -> None:
    parent = by_id.get(c.parent_id) if c.parent_id is not None else None
    if parent is None:
        st.info("No parent: a baseline, written by hand, seeds the islands.")
        return
    lines = difflib.unified_diff(
        parent.source.splitlines(),
        c.source.splitlines(),
        fromfile=frames.candidate_label(parent),
        tofile=frames.candidate_label(c),
        lineterm="",
    )
    text = "\n".join(lines)
    st.code(text or "(the same source; only the tuned constants differ)", language="diff")


def verification_tab(c: CandidateInfo) -> None:
    if not c.verdicts:
        st.info(
            "Not verified: the static check stopped it before Z3 ran." if c.failure_class else "No verdicts."
        )
        return
    st.dataframe(
        frames.verdicts_frame(c),
        hide_index=True,
        column_config={"seconds": st.column_config.NumberColumn(format="%.3f")},
    )
    for v in c.verdicts:
        if v.counterexample:
            box = st.error if v.severity == "hard" else st.warning
            box(f"{v.property} ({v.severity}): counterexample")
            st.json(v.counterexample)


def params_tab(c: CandidateInfo) -> None:
    if not c.params:
        st.info("No tuned constants: the candidate declares no PARAMS, or it never ran.")
    else:
        st.dataframe(
            pd.DataFrame([{"param": k, "value": v} for k, v in sorted(c.params.items())]), hide_index=True
        )
        st.caption("Tuned by Optuna on the training instances, then used on every instance.")
    if c.trials:
        study(c)


def study(c: CandidateInfo) -> None:
    """The stored Optuna study: how tuning went, trial by trial, and which constants mattered."""
    st.markdown(f"**Optimization history** ({len(c.trials)} trials)")
    frame = frames.trials_frame(c, run.direction == "maximize")
    st.altair_chart(charts.history_chart(frame, run.objective), width="stretch")
    st.markdown("**Parameter importance**")
    try:
        importances = data.param_importances(url, run.run_id, c.candidate_id)
    except NoImportance as exc:
        st.caption(f"No parameter importance: {exc}.")
        return
    st.altair_chart(charts.importance_chart(importances), width="stretch")


def metrics_tab(c: CandidateInfo, run: RunInfo) -> None:
    baselines = states.read(data.baselines, url, run.run_id)
    frame = frames.evaluations_frame(frames.policies(c, baselines))
    mine = frame[frame["policy"] == frames.candidate_label(c)]
    if mine.empty:
        st.info("Not evaluated: " + (c.failure_class or c.status))
        return
    metrics = sorted(frame["metric"].unique())
    metric = st.selectbox(
        "Metric", metrics, index=metrics.index(run.objective) if run.objective in metrics else 0, key="metric"
    )
    st.altair_chart(charts.metric_chart(frame, metric, frames.candidate_label(c)), width="stretch")
    table = frame[frame["metric"] == metric].pivot_table(
        index=["instance", "role"], columns="policy", values="value"
    )
    st.dataframe(
        table, column_config={col: st.column_config.NumberColumn(format="%.4f") for col in table.columns}
    )


def sandbox_tab(c: CandidateInfo) -> None:
    if not c.evaluations:
        st.info(f"It never reached the sandbox ({c.failure_class or c.status}).")
        return
    st.markdown(
        f"Backend **{c.backend or '-'}** · outcome **{c.status}**" + (f": {c.message}" if c.message else "")
    )
    st.dataframe(
        frames.sandbox_frame(c),
        hide_index=True,
        column_config={"seconds": st.column_config.NumberColumn(format="%.2f")},
    )


header(candidate)
tabs = st.tabs(["Code", "Diff vs parent", "Verification", "Tuned PARAMS", "Metrics vs baselines", "Sandbox"])
with tabs[0]:
    code_tab(candidate)
with tabs[1]:
    diff_tab(candidate)
with tabs[2]:
    verification_tab(candidate)
with tabs[3]:
    params_tab(candidate)
with tabs[4]:
    metrics_tab(candidate, run)
with tabs[5]:
    sandbox_tab(candidate)
