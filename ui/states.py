"""Empty states and errors that say what to do next: no store, no runs, a run that is gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

import streamlit as st

from search.errors import UserError
from search.service import StoreError, redacted

P = ParamSpec("P")
T = TypeVar("T")


def start_command(url: str) -> str:
    return f"crucible search --target kv --budget 60 --db {redacted(url)}"


def read(fetch: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """The answer of a read, or the page stops with one line saying why the store could not answer."""
    try:
        return fetch(*args, **kwargs)
    except StoreError as exc:
        stop_on_store(str(exc), str(args[0]) if args else "")
    except UserError as exc:
        st.error(str(exc))
        st.stop()


def stop_on_store(reason: str, url: str) -> NoReturn:
    if reason.startswith("no database at"):
        st.warning(f"{reason[0].upper()}{reason[1:]}: nothing has been searched into this store yet.")
        st.markdown("Start a search from the **Launch** page, or on the command line:")
        st.code(start_command(url), language="bash")
    else:
        st.error(f"Cannot read the store: {reason}")
        st.caption("Check the URL given to `crucible ui --db` (any SQLAlchemy URL; SQLite by default).")
    st.stop()


def no_runs(url: str) -> None:
    st.info("No runs in this store yet. Start one from the **Launch** page, or on the command line:")
    st.code(start_command(url), language="bash")
