"""The pages' charts, drawn with Altair (which Streamlit ships) from read-model records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict

import altair as alt
import pandas as pd

from search.service import BaselineInfo, ProgressPoint, StudyReport

AXES = {"done": "candidates finished", "cost_so_far": "proposal cost so far ($)"}
"""The x axes a progress chart offers: against candidates, or against what the proposals cost."""


def _x(x: str) -> alt.X:
    """The progress charts' x axis; candidates are counted in whole numbers."""
    axis = alt.Axis(tickMinStep=1, format="d") if x == "done" else alt.Axis(format="$.4f")
    return alt.X(f"{x}:Q", title=AXES[x], axis=axis)


def progress_frame(points: Sequence[ProgressPoint], maximize: bool) -> pd.DataFrame:
    """The points with each island's best so far beside the run's."""
    frame = pd.DataFrame([asdict(p) for p in points])
    if frame.empty:
        return frame
    scores = frame["score"].astype(float)
    grouped = scores.groupby(frame["island"])
    frame["island_best"] = grouped.cummax() if maximize else grouped.cummin()
    frame["island_best"] = frame.groupby("island")["island_best"].ffill()
    return frame


def _baseline_rules(baselines: Sequence[BaselineInfo], objective: str) -> alt.LayerChart:
    frame = pd.DataFrame([{"baseline": b.name, objective: b.score} for b in baselines if b.score is not None])
    rule = alt.Chart(frame).mark_rule(strokeDash=[4, 4], color="gray", opacity=0.7)
    text = alt.Chart(frame).mark_text(align="left", dx=4, dy=-6, color="gray", fontSize=11)
    return alt.layer(
        rule.encode(y=alt.Y(f"{objective}:Q", title=objective), tooltip=["baseline", f"{objective}:Q"]),
        text.encode(y=alt.Y(f"{objective}:Q", title=objective), x=alt.value(0), text="baseline"),
    )


def progress_chart(
    frame: pd.DataFrame, baselines: Sequence[BaselineInfo], objective: str, x: str = "done"
) -> alt.LayerChart:
    """Best so far (a step line), every scored candidate (dots by island), the baselines (dashed rules)."""
    axis = _x(x)
    scale = alt.Scale(zero=False)
    best = (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", color="black", strokeWidth=2)
        .encode(axis, alt.Y("best_so_far:Q", title=objective, scale=scale))
    )
    dots = (
        alt.Chart(frame.dropna(subset=["score"]))
        .mark_circle(size=60, opacity=0.8)
        .encode(
            axis,
            alt.Y("score:Q", title=objective, scale=scale),
            color=alt.Color("island:N"),
            tooltip=["seq:Q", "candidate_id:Q", "island:N", "status:N", alt.Tooltip("score:Q", format=".4f")],
        )
    )
    return alt.layer(best, dots, _baseline_rules(baselines, objective)).properties(height=320)


def islands_chart(frame: pd.DataFrame, objective: str, x: str = "done") -> alt.Chart:
    """Each island's best so far: which islands carry the search."""
    return (
        alt.Chart(frame.dropna(subset=["island_best"]))
        .mark_line(interpolate="step-after", point=True)
        .encode(
            _x(x),
            alt.Y("island_best:Q", title=f"best {objective} on the island", scale=alt.Scale(zero=False)),
            color=alt.Color("island:N"),
        )
        .properties(height=260)
    )


def runs_chart(frames: Mapping[str, pd.DataFrame], objective: str, x: str = "done") -> alt.Chart:
    """Several runs' best so far on one axis."""
    parts = [f.assign(run=run_id) for run_id, f in frames.items() if not f.empty]
    frame = pd.concat(parts) if parts else pd.DataFrame(columns=[x, "best_so_far", "run"])
    return (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", point=True)
        .encode(
            _x(x),
            alt.Y("best_so_far:Q", title=f"best {objective}", scale=alt.Scale(zero=False)),
            color=alt.Color("run:N"),
            tooltip=["run:N", f"{x}:Q", alt.Tooltip("best_so_far:Q", format=".4f")],
        )
        .properties(height=300)
    )


def metric_chart(frame: pd.DataFrame, metric: str, highlight: str) -> alt.Chart:
    """One metric per instance and role (a held-out tail is scored as tuned and re-tuned on one instance),
    one bar per policy, the highlighted policy in colour."""
    chosen = frame[frame["metric"] == metric]
    chosen = chosen.assign(scored=chosen["instance"] + " · " + chosen["role"])
    return (
        alt.Chart(chosen)
        .mark_bar()
        .encode(
            alt.X("value:Q", title=metric),
            alt.Y("policy:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=200)),
            alt.Row("scored:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
            color=alt.condition(alt.datum.policy == highlight, alt.value("#d62728"), alt.value("#9ecae1")),
            tooltip=["policy:N", "instance:N", "role:N", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(height=alt.Step(20))
    )


def history_chart(frame: pd.DataFrame, objective: str) -> alt.LayerChart:
    """Optuna's optimization history: each trial's train objective (dots), the best so far (a step line)."""
    x = alt.X("number:Q", title="trial", axis=alt.Axis(tickMinStep=1, format="d"))
    y_title = f"{objective} (train)"
    scale = alt.Scale(zero=False)
    best = (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", color="black", strokeWidth=2)
        .encode(x, alt.Y("best_so_far:Q", title=y_title, scale=scale))
    )
    dots = (
        alt.Chart(frame.dropna(subset=["value"]))
        .mark_circle(size=60, color="#1f77b4")
        .encode(
            x,
            alt.Y("value:Q", title=y_title, scale=scale),
            tooltip=["number:Q", "state:N", alt.Tooltip("value:Q", format=".4f")],
        )
    )
    return alt.layer(best, dots).properties(height=260)


def importance_chart(importances: Mapping[str, float]) -> alt.Chart:
    """Each tuned constant's share of the importance, largest first."""
    frame = pd.DataFrame([{"param": k, "importance": v} for k, v in importances.items()])
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            alt.X("importance:Q", title="importance (PED-ANOVA)", scale=alt.Scale(domain=[0, 1])),
            alt.Y("param:N", sort="-x", title=None),
            tooltip=["param:N", alt.Tooltip("importance:Q", format=".3f")],
        )
        .properties(height=alt.Step(24))
    )


def failures_chart(failures: Mapping[str, int]) -> alt.Chart:
    frame = pd.DataFrame([{"class": k, "candidates": v} for k, v in failures.items()])
    return (
        alt.Chart(frame)
        .mark_bar(color="#d62728")
        .encode(
            alt.X("candidates:Q"), alt.Y("class:N", sort="-x", title=None), tooltip=["class", "candidates"]
        )
        .properties(height=alt.Step(22))
    )


def island_map(counts: pd.DataFrame) -> alt.Chart:
    """Candidates per island and status: where the search spent its proposals and what became of them."""
    return alt.Chart(counts).mark_rect().encode(
        alt.X("status:N", title=None),
        alt.Y("island:O"),
        color=alt.Color("candidates:Q", scale=alt.Scale(scheme="blues")),
        tooltip=["island:O", "status:N", "candidates:Q"],
    ).properties(height=alt.Step(28)) + alt.Chart(counts).mark_text(baseline="middle").encode(
        alt.X("status:N"), alt.Y("island:O"), text="candidates:Q"
    )


def pareto_chart(report: StudyReport, x: str, y: str) -> alt.LayerChart:
    """Every trial on two objectives (train), the non-dominated ones in colour and joined in order of `x`:
    what one objective costs in the other."""
    frame = pd.DataFrame(
        [{"trial": p.trial, "front": "front" if p.front else "dominated", x: p.train[x], y: p.train[y]}
         for p in report.points]
    )  # fmt: skip
    axes = (alt.X(f"{x}:Q", title=f"{x} (train)", scale=alt.Scale(zero=False)),
            alt.Y(f"{y}:Q", title=f"{y} (train)", scale=alt.Scale(zero=False)))  # fmt: skip
    colour = alt.Color(
        "front:N", title=None, scale=alt.Scale(domain=["front", "dominated"], range=["#d62728", "#9ecae1"])
    )
    tooltip = ["trial:Q", "front:N", alt.Tooltip(f"{x}:Q", format=".4f"), alt.Tooltip(f"{y}:Q", format=".4f")]
    dots = alt.Chart(frame).mark_circle(size=70, opacity=0.9).encode(*axes, color=colour, tooltip=tooltip)
    line = (
        alt.Chart(frame[frame["front"] == "front"].sort_values([x, y]))
        .mark_line(color="#d62728", strokeDash=[4, 3])
        .encode(*axes, order=alt.Order(f"{x}:Q"))
    )
    return alt.layer(line, dots).properties(height=340)


def timeline_chart(frame: pd.DataFrame) -> alt.Chart:
    """Each series over time, a line per instance, a column per policy: where a fleet's queues build up
    and where its caches hit."""
    return (
        alt.Chart(frame)
        .mark_line()
        .encode(
            alt.X("t_s:Q", title="seconds into the window"),
            alt.Y("value:Q", title=None),
            alt.Color("lane:N", title=None, sort=None),
            alt.Row("series:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
            alt.Column("policy:N", title=None),
            tooltip=[
                "policy:N",
                "lane:N",
                alt.Tooltip("t_s:Q", format=".0f"),
                alt.Tooltip("value:Q", format=".3f"),
            ],
        )
        .properties(width=320, height=160)
        .resolve_scale(y="independent")
    )
