"""Launch: start a search as a background process that survives the page; it appears in Runs.

The target's options form is generated from its declared Options (name, type, default, bounds, choices,
doc), as the CLI's `--set` flags are, so a new option never touches this page.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from search.errors import UserError
from search.loop.selection import CHOICES as SELECT_CHOICES
from search.service.runs import load_target, prepare, target_names
from ui import data, launcher, nav

SANDBOXES = ("auto", "process", "docker")  # `crucible search --sandbox`: auto prefers Docker where it runs

url = data.db_url()
st.title("Launch a search")
st.caption(f"Into the store `{url}`. The search runs in its own process: closing this page does not stop it.")

target_name = st.selectbox("Target", target_names(), key="launch-target")
target = load_target(target_name)
st.caption(target.description)


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


def llm_settings(
    models: str, base_url: str, key_env: str, prices: str, max_cost: float | None
) -> dict[str, Any]:
    return {
        "models": tuple(m.strip() for m in models.split(",") if m.strip()),
        "base_url": base_url.strip() or None,
        "api_key_env": key_env.strip() or None,
        "prices": tuple(prices.split()),
        "max_cost_usd": max_cost,
    }


with st.form("launch"):
    st.subheader("Workload")
    source = st.radio("Workload", ["shipped", "path", "upload"], horizontal=True, key="workload-kind")
    path = st.text_input("Path or generator (e.g. gen:chat:7)", key="workload-path")
    upload = st.file_uploader("Upload a trace", key="workload-upload")
    st.subheader("Options")
    values = {option.name: option_field(option) for option in target.options}
    st.subheader("Search")
    cols = st.columns(4)
    budget = cols[0].number_input("Budget (candidates)", min_value=1, value=20, step=1, key="budget")
    trials = cols[1].number_input("Optuna trials per candidate", min_value=1, value=32, step=1, key="trials")
    workers = cols[2].number_input("Workers", min_value=1, value=2, step=1, key="workers")
    seed = cols[3].number_input("Seed", min_value=0, value=0, step=1, key="seed")
    sandbox = st.selectbox("Sandbox", SANDBOXES, key="sandbox")
    cols = st.columns(2)
    holdout = cols[0].number_input(
        "Hold out this share of the requests, the last in time; empty: none",
        min_value=0.01,
        max_value=0.99,
        value=None,
        help="Tune and select on the head; the best and the baselines are then judged on the tail.",
        key="holdout",
    )
    select = cols[1].radio(
        "Rank candidates on",
        (None, *SELECT_CHOICES),
        format_func=lambda choice: choice or "default",
        horizontal=True,
        help="the whole window, or what tuning never saw: the part after the train share (warm where it "
        "can); default: unseen with a held-out share, else the window",
        key="select",
    )
    st.subheader("Proposer")
    proposer = st.radio("Proposer", ["evolve", "llm", "mix"], horizontal=True, key="proposer")
    models = st.text_input("Models (llm, mix): NAME[:WEIGHT], comma-separated", key="models")
    base_url = st.text_input("Endpoint (OpenAI-compatible base URL; empty: OpenAI)", key="base-url")
    key_env = st.text_input("Variable holding the API key", value="OPENAI_API_KEY", key="key-env")
    prices = st.text_input(
        "Prices: MODEL=PROMPT,COMPLETION in USD per million tokens; space-separated", key="prices"
    )
    max_cost = st.number_input(
        "Stop (resumably) at this proposal cost, USD; empty: no cap",
        min_value=0.0,
        value=None,
        key="max-cost",
    )
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
        workload = str(launcher.keep_upload(url, upload.name, upload.getvalue()))
    chosen = {name: value for name, value in values.items() if value is not None}
    settings = launcher.SearchSettings(
        target=target_name,
        workload=workload,
        options=chosen,
        budget=int(budget),
        proposer=proposer,
        sandbox=sandbox,
        seed=int(seed),
        trials=int(trials),
        workers=int(workers),
        holdout=holdout,
        select=select,
        **(llm_settings(models, base_url, key_env, prices, max_cost) if proposer != "evolve" else {}),
    )
    try:  # the options, workload and settings checked here first: a mistake is one line, nothing started
        prepare(
            target_name,
            workload,
            chosen,
            budget=settings.budget,
            seed=settings.seed,
            trials=settings.trials,
            workers=settings.workers,
            proposer=proposer,
            holdout=holdout,
            select=select,
        )
    except UserError as exc:
        st.error(str(exc))
        st.stop()
    known = data.run_ids_now(url)
    started = launcher.start(launcher.search_argv(url, settings), url)
    with st.spinner("starting the search..."):
        try:
            run_id = launcher.wait_for_run(started, known, lambda: data.run_ids_now(url))
        except RuntimeError as exc:
            st.error(f"The search did not start: {exc}")
            st.caption(f"Its output: `{started.log}`")
            st.stop()
    st.cache_data.clear()
    st.switch_page(nav.RUN, query_params={"run": run_id})
