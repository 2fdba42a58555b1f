"""Stop and Resume on a run's page: stop goes through the run service (the run stays resumable); resume
starts `crucible search --resume` detached, as the Launch page starts a search."""

from __future__ import annotations

import streamlit as st

from search.service import RunInfo, RunService, launch, open_service, redacted


def _service(url: str) -> RunService:
    return open_service(url, create=False)


def run_controls(url: str, run: RunInfo) -> None:
    if run.status == "running":
        stop_button(url, run)
    elif run.resumable:
        resume_button(url, run)
        st.caption(f"From a shell: `crucible search --resume {run.run_id} --db {redacted(url)}`")


def execute(url: str, run_id: str, sandbox: str | None = None) -> str | None:
    """Start executing a stored run in a detached process; None once it runs, else why it could not."""
    read = _service(url).read
    return launch(url, run_id, lambda found: read.run(found).status, sandbox)


def stop_button(url: str, run: RunInfo) -> None:
    if st.button("Stop", icon=":material/stop:", key="stop", help="stop after the candidates in flight"):
        _service(url).stop(run.run_id)
        st.cache_data.clear()
        st.rerun()


def resume_button(url: str, run: RunInfo) -> None:
    if not st.button("Resume", icon=":material/play_arrow:", key="resume", help="continue from the store"):
        return
    with st.spinner("resuming..."):
        failure = execute(url, run.run_id)
    if failure:
        st.error(f"The run could not be resumed: {failure}")
        return
    st.cache_data.clear()
    st.rerun()
