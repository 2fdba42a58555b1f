"""Compare: two candidates, or a candidate and a baseline, side by side across instances and metrics."""

from __future__ import annotations

import difflib

import altair as alt
import streamlit as st

from ui import data, frames, nav, states

url = data.db_url()
st.title("Compare")
runs = states.read(data.runs, url)
if not runs:
    states.no_runs(url)
    st.stop()
run = nav.choose_run(runs)
assert run is not None
candidates = states.read(data.candidates, url, run.run_id)
baselines = states.read(data.baselines, url, run.run_id)
ran = [c for c in candidates if c.evaluations]
if not ran:
    st.info("Nothing evaluated in this run yet.")
    st.stop()

best = run.best.candidate_id if run.best else None
left_col, right_col = st.columns(2)
with left_col:
    left = nav.choose_candidate(ran, "Left: candidate", "left", best, key="left")
with right_col:
    kind = st.radio("Right", ["baseline", "candidate"], horizontal=True, key="right-kind")
    if kind == "baseline":
        named = {b.name: b for b in baselines}
        ranked = sorted(named, key=lambda n: named[n].score or 0.0, reverse=run.direction == "maximize")
        name = st.selectbox("Right: baseline", ranked, key="right-baseline")
        right_label, right_evals, right_source = name, named[name].evaluations, None
        same = [c for c in candidates if c.is_baseline and c.name == name]
        right_source = same[0].source if same else None
    else:
        others = [c for c in ran if left is None or c.candidate_id != left.candidate_id] or ran
        right = nav.choose_candidate(others, "Right: candidate", "right", None, key="right")
        assert right is not None
        right_label, right_evals, right_source = (
            frames.candidate_label(right),
            right.evaluations,
            right.source,
        )
assert left is not None

table = frames.side_by_side(left.evaluations, right_evals)
if table.empty:
    st.warning("These two share no evaluated instance.")
    st.stop()
metrics = sorted(table["metric"].unique())
shown = st.multiselect(
    "Metrics", metrics, default=[m for m in metrics if m == run.objective] or metrics[:1], key="metrics"
)
chosen = table[table["metric"].isin(shown)].rename(
    columns={"left": frames.candidate_label(left), "right": right_label}
)
st.dataframe(
    chosen,
    hide_index=True,
    column_config={c: st.column_config.NumberColumn(format="%.4f") for c in chosen.columns[3:]},
)
long = chosen.melt(
    id_vars=["instance", "role", "metric"],
    value_vars=[frames.candidate_label(left), right_label],
    var_name="policy",
)
st.altair_chart(
    alt.Chart(long)
    .mark_bar()
    .encode(
        alt.X("value:Q"),
        alt.Y("policy:N", title=None),
        alt.Row("instance:N", title=None),
        alt.Column("metric:N", title=None),
        color="policy:N",
        tooltip=["policy", "instance", "metric", alt.Tooltip("value:Q", format=".4f")],
    )
    .resolve_scale(x="independent"),
)
if right_source is not None:
    with st.expander("Source diff"):
        diff = difflib.unified_diff(
            left.source.splitlines(),
            right_source.splitlines(),
            frames.candidate_label(left),
            right_label,
            lineterm="",
        )
        st.code("\n".join(diff) or "(the same source)", language="diff")
