"""Stop and Resume on a run's page: stop goes through the run service (the run stays resumable); resume
starts `crucible search --resume` detached, as the Launch page starts a search."""

from __future__ import annotations

import time

import streamlit as st

from search.service.runs import RunService
from search.store.readmodel import RunInfo
from search.store.store import Store, open_engine
from ui import launcher


def _service(url: str) -> RunService:
    return RunService(Store(open_engine(url, create=False)))


def _wait_running(url: str, run_id: str, started: launcher.Started, timeout_s: float = 20.0) -> str | None:
    """None once the resumed run is running again, else the line its process failed with."""
    service = _service(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if service.read.run(run_id).status == "running":
            return None
        if started.process.poll() is not None:
            return launcher.error_line(started.log)
        time.sleep(0.3)
    return f"it has not started within {timeout_s:.0f} s; its output is in {started.log}"


def run_controls(url: str, run: RunInfo) -> None:
    if run.status == "running":
        stop_button(url, run)
    elif run.resumable:
        resume_button(url, run)
        st.caption(f"From a shell: `crucible search --resume {run.run_id} --db {url}`")


def stop_button(url: str, run: RunInfo) -> None:
    if st.button("Stop", icon=":material/stop:", key="stop", help="stop after the candidates in flight"):
        _service(url).stop(run.run_id)
        st.cache_data.clear()
        st.rerun()


def resume_button(url: str, run: RunInfo) -> None:
    if not st.button("Resume", icon=":material/play_arrow:", key="resume", help="continue from the store"):
        return
    started = launcher.start(launcher.resume_argv(url, run.run_id), url)
    with st.spinner("resuming..."):
        failure = _wait_running(url, run.run_id, started)
    if failure:
        st.error(f"The run could not be resumed: {failure}")
        return
    st.cache_data.clear()
    st.rerun()
