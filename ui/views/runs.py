"""Runs: every run in the store, and several runs' best score against candidates and against cost."""

from __future__ import annotations

import streamlit as st

from ui import charts, data, frames, nav, states

url = data.db_url()
st.title("Runs")


def runs_table() -> None:
    runs = states.read(data.runs, url)
    if not runs:
        states.no_runs(url)
        return
    table = frames.runs_frame(runs)
    picked = st.dataframe(
        table,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="runs-table",
        column_config={
            "progress": st.column_config.ProgressColumn(
                "progress", min_value=0.0, max_value=1.0, format="percent"
            ),
            "best": st.column_config.NumberColumn(format="%.4f"),
            "vs baseline": st.column_config.NumberColumn(format="%+.4f"),
            "cost $": st.column_config.NumberColumn(format="$%.4f"),
        },
    )
    rows = picked.selection.rows if picked else []
    if rows:
        st.switch_page(nav.RUN, query_params={"run": table.iloc[rows[0]]["run"]})
    st.caption("Select a row to open its run.")

    st.subheader("Compare runs")
    newest = list(reversed(runs))
    same = [r.run_id for r in newest if r.objective == newest[0].objective][:5]
    chosen = st.multiselect("Runs", [r.run_id for r in newest], default=same, key="compare-runs")
    axis = st.radio(
        "Against", list(charts.AXES), format_func=charts.AXES.get, horizontal=True, key="runs-axis"
    )
    by_id = {r.run_id: r for r in runs}
    for objective in sorted({by_id[i].objective for i in chosen}):
        group = [by_id[i] for i in chosen if by_id[i].objective == objective]
        progress = {
            r.run_id: charts.progress_frame(
                states.read(data.progress, url, r.run_id), r.direction == "maximize"
            )
            for r in group
        }
        st.altair_chart(charts.runs_chart(progress, objective, axis), width="stretch")


live = any(r.status == "running" for r in states.read(data.runs, url))
st.fragment(runs_table, run_every=nav.REFRESH_S if live else None)()
