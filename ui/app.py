"""The app's entry: `streamlit run ui/app.py` (what `crucible ui` starts); the pages are in ui/views/."""

from __future__ import annotations

import streamlit as st

from ui import data, nav

st.set_page_config(page_title="Crucible", page_icon="🔥", layout="wide")
pages = st.navigation(
    [
        st.Page(nav.RUNS, title="Runs", icon=":material/list:", url_path="runs", default=True),
        st.Page(nav.RUN, title="Run", icon=":material/monitoring:", url_path="run"),
        st.Page(nav.CANDIDATE, title="Candidate", icon=":material/code:", url_path="candidate"),
        st.Page(nav.COMPARE, title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        st.Page(nav.LAUNCH, title="Launch", icon=":material/rocket_launch:", url_path="launch"),
    ]
)
st.sidebar.caption(f"store: `{data.shown_url()}`")
pages.run()
