"""Launch: create a search through the run service and execute it in a process that survives the page.

Every field is generated from a declaration, so a new option, setting or proposer never touches this
page: the target's Options (as the CLI's `--set` flags are), the run's settings (search/settings.py) and
the chosen proposer's own settings. The run is created here, with its id known; a detached process then
executes it, as Resume does.
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from search.errors import UserError
from search.service import (
    SETTINGS,
    Option,
    OptionError,
    ProposerUnavailable,
    keep_upload,
    load_target,
    open_service,
    prepare,
    proposer_for,
    proposer_kind,
    proposer_names,
    target_names,
)
from ui import controls, data, nav

url = data.db_url()
st.title("Launch a search")
st.caption(
    f"Into the store `{data.shown_url()}`. The search runs in its own process: closing this page does not "
    "stop it."
)

target_name = st.selectbox("Target", target_names(), key="launch-target")
target = load_target(target_name)
st.caption(target.description)
kind = proposer_kind(st.selectbox("Proposer", proposer_names(), key="proposer"))
st.caption(kind.doc)


def option_field(option: Any) -> Any:
    """One form field per declared option; None leaves the option at its default (or unset)."""
    label = f"{option.name} ({option.type})"
    key = f"opt-{target_name}-{option.name}"
    if option.type == "bool":
        return st.checkbox(label, value=bool(option.default), help=option.doc, key=key)
    if option.choices and option.type != "path":
        choices = list(option.choices)
        index = choices.index(option.default) if option.default in choices else 0
        return st.selectbox(label, choices, index=index, help=option.doc, key=key)
    if option.type in ("int", "float"):
        whole = option.type == "int"
        cast = int if whole else float
        return st.number_input(
            label,
            min_value=None if option.low is None else cast(option.low),
            max_value=None if option.high is None else cast(option.high),
            value=None if option.default is None else cast(option.default),
            step=1 if whole else None,
            help=f"{option.doc} Allowed: {option.allowed()}.",
            key=key,
        )
    hint = f" Named choices: {', '.join(map(str, option.choices))}." if option.choices else ""
    text = st.text_input(label, value=option.default or "", help=f"{option.doc}{hint}", key=key)
    return text.strip() or None


def setting_field(setting: Option, column: Any) -> Any:
    """One form field per run or proposer setting, at its one default; None (left empty) keeps that default
    or leaves it unset. Texts are parsed as the CLI parses the flag."""
    key, label = f"setting-{setting.name}", setting.name
    if setting.type == "bool":
        return column.checkbox(label, value=bool(setting.default), help=setting.doc, key=key)
    if setting.allowed_values():
        allowed = setting.allowed_values()
        choices = [None, *allowed] if setting.default is None else list(allowed)
        index = choices.index(setting.default)
        return column.selectbox(label, choices, index=index, format_func=_shown, help=setting.doc, key=key)
    if setting.type in ("int", "float"):
        whole = setting.type == "int"
        return column.number_input(
            label,
            value=setting.default,
            step=1 if whole else None,
            format=None if whole else "%g",
            help=setting.doc,
            key=key,
        )
    default = " ".join(setting.default) if setting.type == "list" else setting.default or ""
    hint = " Several: separate them by spaces." if setting.type == "list" else ""
    text = column.text_input(label, value=default, help=setting.doc + hint, key=key)
    return setting.parse(text) if text.strip() else None


def _shown(choice: Any) -> str:
    return "default" if choice is None else str(choice)


def fields(settings: tuple[Option, ...]) -> dict[str, Any]:
    columns = st.columns(3)
    return {s.name: setting_field(s, columns[i % 3]) for i, s in enumerate(settings)}


with st.form("launch"):
    st.subheader("Workload")
    source = st.radio("Workload", ["shipped", "path", "upload"], horizontal=True, key="workload-kind")
    path = st.text_input("Path or generator (e.g. gen:chat:7)", key="workload-path")
    upload = st.file_uploader("Upload a trace", key="workload-upload")
    st.subheader("Options")
    values = {option.name: option_field(option) for option in target.options}
    st.subheader("Run")
    try:
        run_settings = fields(tuple(s for s in SETTINGS if s.name != "proposer"))
        st.subheader(f"Proposer: {kind.name}")
        proposer_settings = fields(kind.settings) if kind.settings else {}
    except OptionError as exc:
        run_settings, proposer_settings = {}, {}
        st.error(str(exc))
    submitted = st.form_submit_button("Launch", type="primary", icon=":material/rocket_launch:")

if submitted:
    workload: str | None = None
    if source == "path":
        workload = path.strip() or None
        if workload is None:
            st.error("Give a workload path, or choose the shipped workload.")
            st.stop()
    elif source == "upload":
        if upload is None:
            st.error("Upload a trace file, or choose the shipped workload.")
            st.stop()
        workload = str(keep_upload(url, upload.name, upload.getvalue()))
    chosen = {name: value for name, value in values.items() if value is not None}
    settings = {**run_settings, **proposer_settings, "proposer": kind.name}
    with st.spinner("starting the search..."):
        try:  # everything checked first: a mistake is one line and nothing is stored
            config = prepare(target_name, workload, chosen, **settings)
            proposer_for(config, os.environ)
            info = open_service(url).record(config)
        except (UserError, ProposerUnavailable) as exc:
            st.error(f"The search did not start: {' '.join(str(exc).split())}")
            st.stop()
        failure = controls.execute(url, info.run_id)
    if failure:
        st.error(f"The search did not start: {failure}")
        st.caption(f"Run {info.run_id} is stored; resume it from its page once the cause is fixed.")
        st.stop()
    st.cache_data.clear()
    st.switch_page(nav.RUN, query_params={"run": info.run_id})
