"""The pages' only way to the data: the run service's read model, read through a short cache.

A page reruns on every click, so each answer is cached for a couple of seconds: a page reads the store once
per interaction, and a live run's page still sees new candidates within its refresh interval. Nothing here
writes or re-evaluates; the store is opened without creating it, so a mistyped path is an error, not an
empty database.
"""

from __future__ import annotations

import os

import streamlit as st

from search.errors import UserError
from search.service import (
    DEFAULT_STORE,
    STORE_ENV,
    BaselineInfo,
    Budget,
    CandidateInfo,
    EventInfo,
    HoldoutReport,
    ProgressPoint,
    ProposerStats,
    ReadModel,
    RunInfo,
    StudyReport,
    open_service,
    redacted,
)

TTL_S = 2.0
"""How long an answer is reused: shorter than the live pages' refresh interval."""


def shown_url() -> str:
    """The store as the pages show it: a password in its URL never drawn."""
    return redacted(db_url())


def db_url() -> str:
    """The store this app reads: the one `crucible ui --db` was given, else the CLI's default."""
    return os.environ.get(STORE_ENV, DEFAULT_STORE)


@st.cache_resource(show_spinner=False)
def _read_model(url: str) -> ReadModel:
    return open_service(url, create=False).read


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(url: str) -> list[RunInfo]:
    return _read_model(url).runs()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run(url: str, run_id: str) -> RunInfo:
    return _read_model(url).run(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def candidates(url: str, run_id: str) -> list[CandidateInfo]:
    return _read_model(url).candidates(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def baselines(url: str, run_id: str) -> list[BaselineInfo]:
    return _read_model(url).baselines(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def progress(url: str, run_id: str) -> list[ProgressPoint]:
    return _read_model(url).progress(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def proposer_stats(url: str, run_id: str) -> list[ProposerStats]:
    return _read_model(url).proposer_stats(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def failures(url: str, run_id: str) -> dict[str, int]:
    return _read_model(url).failures(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def budget(url: str, run_id: str) -> Budget:
    return _read_model(url).budget(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def holdout(url: str, run_id: str) -> HoldoutReport | None:
    return _read_model(url).holdout(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def study(url: str, run_id: str) -> StudyReport | None:
    return _read_model(url).study(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def events(url: str, run_id: str) -> list[EventInfo]:
    return _read_model(url).events(run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def heuristic_file(url: str, run_id: str, candidate_id: int) -> str:
    return _read_model(url).heuristic_file(run_id, candidate_id)


@st.cache_data(show_spinner=False)
def param_importances(url: str, run_id: str, candidate_id: int) -> dict[str, float]:
    """From the stored study alone, so a finished candidate's answer never changes: cached without expiry."""
    return _read_model(url).param_importances(run_id, candidate_id)


def run_ids_now(url: str) -> set[str]:
    """The ids of the runs stored right now (uncached; none while the store does not exist yet)."""
    try:
        return {r.run_id for r in _read_model(url).runs()}
    except UserError:
        return set()
