"""Read-model answers as tables: the rows the pages show, and the filters a leaderboard offers.

Plain functions from records to pandas frames, so what a page shows is testable without a browser.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from search.service import (
    BaselineInfo,
    Budget,
    CandidateInfo,
    EvaluationInfo,
    HoldoutReport,
    ProposerStats,
    RunInfo,
    StudyReport,
)


def options_text(options: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items()))


def runs_frame(runs: Sequence[RunInfo]) -> pd.DataFrame:
    """One row per run, newest first: settings, state, progress, best against the best baseline, spend."""
    rows = []
    for r in reversed(runs):
        best = r.best.score if r.best else None
        base = r.best_baseline.score if r.best_baseline else None
        rows.append(
            {
                "run": r.run_id,
                "target": r.target,
                "workload": Path(r.workload).name if r.workload else "",
                "options": options_text(r.options),
                "status": r.status,
                "progress": r.done / r.budget if r.budget else 0.0,
                "done": f"{r.done}/{r.budget}",
                "best": best,
                "best baseline": f"{r.best_baseline.name} {base:.4f}" if base is not None else "",
                "vs baseline": best - base if best is not None and base is not None else None,
                "tokens": r.tokens,
                "cost $": r.cost_usd,
                "created": r.created_at[:19].replace("T", " "),
            }
        )
    return pd.DataFrame(rows)


BUDGET_STAGES = {
    "duplicates": "duplicate proposals (discarded)",
    "failed_proposals": "failed proposals (no program)",
    "static": "rejected by the static check",
    "refuted": "refuted by the verifier",
    "behaved_alike": "behaved as an evaluated program (not tuned)",
    "faulted": "failed in the sandbox",
    "gated": "gated by the cascade",
    "evaluated": "evaluated",
    "pending": "pending",
}
"""The read model's Budget fields in the order a proposal meets them, as the page names them."""


def budget_frame(budget: Budget) -> pd.DataFrame:
    """Where the run's proposals went, stage by stage (stages with none left out)."""
    counts = budget.to_json()
    return pd.DataFrame(
        [{"stage": name, "count": counts[key]} for key, name in BUDGET_STAGES.items() if counts[key]]
    )


def holdout_frame(report: HoldoutReport) -> pd.DataFrame:
    """Each policy on the head it was selected on and on the held-out tail, and the found policy's tail score
    as a multiple of each one's: how far its lead carries to traffic the search never saw."""
    found = report.found_tail()
    return pd.DataFrame(
        [
            {
                "policy": r.name,
                "kind": "oracle" if r.oracle else r.kind,
                report.head_label(): r.head,
                f"tail {report.tail}": r.tail,
                "tail re-tuned": r.tail_retuned,
                "found / this, tail": found / r.tail if found is not None and r.tail else None,
            }
            for r in report.rows
        ]
    )


def study_frame(report: StudyReport) -> pd.DataFrame:
    """Each trial that ran with values: its knobs, its objectives on train and, for the front, on eval;
    the policy as configured first (eval only). Front trials come next, best first by the first objective."""
    front = [p.trial for p in report.front()]
    rank = {trial: i for i, trial in enumerate(front)}
    ordered = sorted(report.points, key=lambda p: (rank.get(p.trial, len(front)), p.trial))
    configured = {f"{m} (eval)": v for m, v in report.configured.items()}
    rows: list[dict[str, object]] = [
        {"point": "as configured", "front": None, **report.configured_values, **configured}
    ]
    for p in ordered:
        row: dict[str, object] = {"point": f"trial {p.trial}", "front": p.front, **p.values}
        row |= {f"{m} (train)": v for m, v in p.train.items()}
        row |= {f"{m} (eval)": v for m, v in p.eval.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def proposer_label(c: CandidateInfo) -> str:
    return f"{c.proposer}/{c.model}" if c.model else c.proposer


def proposal_line(figures: Mapping[str, Any]) -> str:
    """How a candidate was proposed, in one line: the seconds, and a model's tokens and replies."""
    parts = [f"proposed in {figures.get('seconds', 0):.1f} s"]
    if "prompt_tokens" in figures:
        about = "about " if figures.get("estimated") else ""
        parts.append(f"{about}{figures['prompt_tokens']:,} tokens in, {figures['completion_tokens']:,} out")
    if figures.get("replies"):
        parts.append("replies: " + " → ".join(figures["replies"]))
    return " · ".join(parts)


def verified(c: CandidateInfo) -> bool:
    """Every hard property proved (an unknown is not a proof; a soft counterexample does not count)."""
    hard = [v for v in c.verdicts if v.severity == "hard"]
    return bool(hard) and all(v.verdict == "proved" for v in hard)


@dataclass(frozen=True)
class Filters:
    """What the leaderboard keeps; an empty selection keeps everything."""

    verified_only: bool = False
    proposers: tuple[str, ...] = ()
    islands: tuple[int, ...] = ()
    statuses: tuple[str, ...] = ()
    baselines: bool = True

    def keeps(self, c: CandidateInfo) -> bool:
        return (
            (self.baselines or not c.is_baseline)
            and (not self.verified_only or verified(c))
            and (not self.proposers or proposer_label(c) in self.proposers)
            and (not self.islands or c.island in self.islands)
            and (not self.statuses or c.status in self.statuses)
        )


@dataclass(frozen=True)
class Choices:
    """The values each leaderboard filter can take in a run."""

    proposers: list[str] = field(default_factory=list)
    islands: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)


def choices(candidates: Iterable[CandidateInfo]) -> Choices:
    listed = list(candidates)
    return Choices(
        proposers=sorted({proposer_label(c) for c in listed}),
        islands=sorted({c.island for c in listed}),
        statuses=sorted({c.status for c in listed}),
    )


def leaderboard(candidates: Iterable[CandidateInfo], filters: Filters, maximize: bool) -> pd.DataFrame:
    """The kept candidates, best score first (unscored ones last, in the order they were proposed)."""
    kept = [c for c in candidates if filters.keeps(c)]
    scored = sorted((c for c in kept if c.score is not None), key=lambda c: c.score, reverse=maximize)  # type: ignore[arg-type, return-value]
    rest = sorted((c for c in kept if c.score is None), key=lambda c: c.seq)
    rows = [
        {
            "id": c.candidate_id,
            "seq": c.seq,
            "name": c.name or ("baseline" if c.is_baseline else ""),
            "status": c.status,
            "score": c.score,
            "train": c.train_score,
            "verified": verified(c),
            "island": c.island,
            "proposer": proposer_label(c),
            "parent": c.parent_id,
            "failure": c.failure_class,
            "tokens": c.tokens,
            "cost $": c.cost_usd,
        }
        for c in [*scored, *rest]
    ]
    return pd.DataFrame(rows)


def islands_frame(candidates: Iterable[CandidateInfo], maximize: bool) -> pd.DataFrame:
    """Per island: candidates, how many ran, and its best candidate."""
    table: dict[int, dict[str, object]] = {}
    for c in candidates:
        row = table.setdefault(
            c.island, {"island": c.island, "candidates": 0, "ran": 0, "best": None, "best id": None}
        )
        row["candidates"] = int(row["candidates"]) + 1  # type: ignore[call-overload]
        if c.score is not None:
            row["ran"] = int(row["ran"]) + 1  # type: ignore[call-overload]
            best = row["best"]
            if best is None or (c.score > best if maximize else c.score < best):  # type: ignore[operator]
                row["best"], row["best id"] = c.score, c.candidate_id
    return pd.DataFrame([table[k] for k in sorted(table)])


def proposers_frame(stats: Sequence[ProposerStats]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "proposer": s.proposer,
                "model": s.model or "-",
                "proposals": s.proposals,
                "failed": s.failed,
                "rejected": s.rejected,
                "ran": s.ran,
                "improved": s.improved,
                "success": s.success_rate,
                "best": s.best,
                "tokens": s.tokens,
                "cost $": s.cost_usd,
            }
            for s in stats
        ]
    )


def evaluations_frame(policies: dict[str, Sequence[EvaluationInfo]]) -> pd.DataFrame:
    """Long form, one row per policy, instance and metric: what the per-instance charts draw."""
    rows = [
        {"policy": name, "instance": e.instance, "role": e.role, "metric": metric, "value": value}
        for name, evaluations in policies.items()
        for e in evaluations
        for metric, value in sorted(e.metrics.items())
    ]
    return pd.DataFrame(rows, columns=["policy", "instance", "role", "metric", "value"])


def trials_frame(c: CandidateInfo, maximize: bool) -> pd.DataFrame:
    """The candidate's Optuna trials in order, with the best value so far (complete trials only score)."""
    frame = pd.DataFrame(c.trials, columns=["number", "value", "state"])
    values = frame["value"].astype(float)
    best = values.cummax() if maximize else values.cummin()
    frame["best_so_far"] = best.ffill()  # a pruned trial keeps the best line going
    return frame


def policies(candidate: CandidateInfo, baselines: Sequence[BaselineInfo]) -> dict[str, list[EvaluationInfo]]:
    """The candidate's evaluations and every baseline's, by the name a chart shows."""
    return {candidate_label(candidate): candidate.evaluations, **{b.name: b.evaluations for b in baselines}}


def candidate_label(c: CandidateInfo) -> str:
    if c.is_baseline:
        return c.name
    return c.label


def side_by_side(left: Sequence[EvaluationInfo], right: Sequence[EvaluationInfo]) -> pd.DataFrame:
    """Every metric on every instance both were evaluated on: left, right and the difference."""
    rights = {(e.instance, e.role): e.metrics for e in right}
    rows = []
    for e in left:
        other = rights.get((e.instance, e.role))
        if other is None:
            continue
        for metric in sorted(set(e.metrics) & set(other)):
            a, b = e.metrics[metric], other[metric]
            rows.append(
                {
                    "instance": e.instance,
                    "role": e.role,
                    "metric": metric,
                    "left": a,
                    "right": b,
                    "right - left": b - a,
                }
            )
    return pd.DataFrame(rows, columns=["instance", "role", "metric", "left", "right", "right - left"])


def verdicts_frame(c: CandidateInfo) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "property": v.property,
                "severity": v.severity,
                "verdict": v.verdict,
                "seconds": v.seconds,
                "message": v.message,
            }
            for v in c.verdicts
        ],
        columns=["property", "severity", "verdict", "seconds", "message"],
    )


def sandbox_frame(c: CandidateInfo) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"instance": e.instance, "role": e.role, "backend": e.backend, "seconds": e.seconds}
            for e in c.evaluations
        ],
        columns=["instance", "role", "backend", "seconds"],
    )


def timeline_frame(policies: Mapping[str, EvaluationInfo]) -> pd.DataFrame:
    """Each policy's timelines on one instance, long: policy, series, lane, seconds, value."""
    rows = [
        {"policy": policy, "series": series, "lane": f"instance {lane}", "t_s": k * e.step_s, "value": value}
        for policy, e in policies.items()
        for series, lanes in e.timelines.items()
        for lane, points in enumerate(lanes)
        for k, value in enumerate(points)
    ]
    return pd.DataFrame(rows, columns=["policy", "series", "lane", "t_s", "value"])
