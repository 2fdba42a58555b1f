"""Which run and candidate a page shows, kept in the URL's query (?run=...&candidate=...) so every page
can be linked to, reloaded and opened from the genealogy's nodes; and the paths of the pages."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from search.service import CandidateInfo, RunInfo

from .frames import candidate_label

RUNS = "views/runs.py"
RUN = "views/run.py"
CANDIDATE = "views/candidate.py"
COMPARE = "views/compare.py"
LAUNCH = "views/launch.py"

REFRESH_S = 3.0
"""How often a page showing a running run reads the store again."""


def run_label(r: RunInfo) -> str:
    return f"{r.run_id} · {r.target} · {r.status} · created {r.created_at[:16].replace('T', ' ')}"


def choose_run(runs: Sequence[RunInfo], key: str = "run") -> RunInfo | None:
    """A selectbox of the runs, newest first, starting at the URL's ?run= and writing the choice back."""
    if not runs:
        return None
    newest = list(reversed(runs))
    ids = [r.run_id for r in newest]
    wanted = st.query_params.get("run")
    index = ids.index(wanted) if wanted in ids else 0
    chosen = st.selectbox("Run", newest, index=index, format_func=run_label, key=f"{key}-{index}")
    st.query_params["run"] = chosen.run_id
    return chosen


def candidate_choice_label(c: CandidateInfo) -> str:
    score = "-" if c.score is None else f"{c.score:.4f}"
    kind = "baseline" if c.is_baseline else c.status
    return f"{candidate_label(c)} · {kind} · {score}"


def choose_candidate(
    candidates: Sequence[CandidateInfo], label: str, param: str, default: int | None, key: str
) -> CandidateInfo | None:
    """A selectbox of the candidates, starting at the URL's ?<param>= (else `default`), written back."""
    if not candidates:
        return None
    ids = [c.candidate_id for c in candidates]
    text = st.query_params.get(param)
    wanted = int(text) if text and text.isdigit() else default
    index = ids.index(wanted) if wanted in ids else 0
    chosen = st.selectbox(
        label, candidates, index=index, format_func=candidate_choice_label, key=f"{key}-{index}"
    )
    st.query_params[param] = str(chosen.candidate_id)
    return chosen


def candidate_link(run_id: str, candidate_id: int) -> str:
    """The URL of a candidate's page, relative to any page of the app (they all sit at the top level)."""
    return f"candidate?run={run_id}&candidate={candidate_id}"
