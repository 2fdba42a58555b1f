"""The web UI in a real browser: `crucible ui` on 127.0.0.1 and Debian's headless Chromium driven by
Playwright. Every page is opened and clicked through, with a screenshot of each in tests/artifacts/ and no
Streamlit exception box anywhere; a search launched from the UI shows its progress on the Run page within
its refresh interval and, stopped there, is left resumable."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from headless import chromium
from seeded_store import Seeded

from search import cli
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
EXCEPTION = '[data-testid="stException"]'
METRIC = '[data-testid="stMetric"]'
VEGA = '[data-testid="stVegaLiteChart"]'
CODE = '[data-testid="stCode"]'
FORM = '[data-testid="stForm"]'


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@dataclass(frozen=True)
class Server:
    url: str
    """The store the UI reads (a copy of the seeded one)."""
    base: str

    @property
    def read(self) -> ReadModel:
        return ReadModel(Store(open_engine(self.url, create=False)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(url: str, folder: Path) -> Iterator[Server]:
    """`crucible ui` on the store at `url`, on a free port of 127.0.0.1, until the block ends."""
    port = _free_port()
    log = (folder / "ui.log").open("wb")
    argv = [sys.executable, "-m", "search.cli", "ui", "--db", url, "--port", str(port), "--host", "127.0.0.1"]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as reply:
                if reply.read() == b"ok":
                    break
        except OSError:
            pass
        assert process.poll() is None, (folder / "ui.log").read_text()
        assert time.monotonic() < deadline, "crucible ui did not answer within 60 s"
        time.sleep(0.3)
    yield Server(url, base)
    process.terminate()
    process.wait(timeout=20)
    log.close()


@pytest.fixture(scope="module")
def server(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("ui-browser")
    copy = folder / "crucible.db"
    with sqlite3.connect(seeded.url.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with serving(f"sqlite:///{copy}", folder) as running:
        yield running


@pytest.fixture(scope="module")
def tuned_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A store holding one two-objective `crucible tune` study (a real one, twelve trials)."""
    folder = tmp_path_factory.mktemp("ui-browser-tune")
    url = f"sqlite:///{folder / 'crucible.db'}"
    tune = [
        "tune",
        "--target",
        "batching",
        "--policy",
        "fcfs",
        "--set",
        "requests=0:100",
        "--set",
        "load=1.5",
    ]
    goals = ["--objective", "ttft_p99_ms", "--objective", "tpot_p99_ms", "--trials", "12", "--seed", "0"]
    cli.main(
        [*tune, *goals, "--sandbox", "process", "--storage", f"sqlite:///{folder / 'study.db'}", "--db", url]
    )
    with serving(url, folder) as running:
        yield running


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1800})
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    yield tab
    context.close()


def settle(page: Any) -> None:
    """Wait until the script has run and the page has drawn; fail on any exception box."""
    page.wait_for_selector(IDLE)
    page.wait_for_timeout(500)
    page.wait_for_selector(IDLE)
    assert page.locator(EXCEPTION).count() == 0, page.locator(EXCEPTION).first.inner_text()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    settle(page)
    page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"), full_page=True)


def open_page(page: Any, server: Server, path: str, heading: str, ready: str) -> None:
    """Go to `path` and wait for its heading and for the element `ready` (a CSS selector) it draws last."""
    page.goto(server.base + path)
    page.get_by_role("heading", name=heading, exact=True).wait_for()
    page.wait_for_selector(ready)
    settle(page)


def click_tab(page: Any, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    settle(page)


def test_every_page_opens_and_clicks_through(seeded: Seeded, server: Server, page: Any) -> None:
    run = seeded.finished
    open_page(page, server, "/", "Runs", VEGA)
    assert page.get_by_text(run.run_id).count() >= 1
    page.get_by_text("proposal cost so far ($)").click()
    shot(page, "runs")
    table = page.locator('[data-testid="stDataFrame"]').first.bounding_box()
    page.mouse.click(table["x"] + 15, table["y"] + 53)  # the first row's selection box: the newest run
    page.wait_for_url(f"**/run?run={seeded.stopped.run_id}*")

    open_page(page, server, f"/run?run={run.run_id}", "Run", VEGA)
    assert f"{run.done}/{run.budget}" in page.locator(METRIC).filter(has_text="candidates").inner_text()
    shot(page, "run")
    for tab in ("Leaderboard", "Islands", "Failures", "Proposers", "Held-out tail", "Genealogy"):
        click_tab(page, tab)
        shot(page, f"run-{tab.lower()}")
    node = page.locator('[data-testid="stGraphVizChart"] svg a').first
    node.click()  # a node of the genealogy opens its candidate
    page.get_by_role("heading", name="Candidate", exact=True).wait_for()
    page.wait_for_selector(CODE)
    settle(page)
    assert "candidate=" in page.url

    open_page(
        page, server, f"/candidate?run={run.run_id}&candidate={run.best.candidate_id}", "Candidate", CODE
    )
    assert page.get_by_text("the run's best").count() >= 1
    shot(page, "candidate")
    for tab in ("Diff vs parent", "Verification", "Tuned PARAMS", "Metrics vs baselines", "Sandbox"):
        click_tab(page, tab)
        shot(page, f"candidate-{tab.split()[0].lower()}")

    open_page(page, server, f"/compare?run={run.run_id}", "Compare", VEGA)
    shot(page, "compare")

    open_page(page, server, "/launch", "Launch a search", FORM)
    shot(page, "launch")


def test_a_search_launched_from_the_ui_shows_progress_and_stops_resumably(server: Server, page: Any) -> None:
    before = {r.run_id for r in server.read.runs()}
    open_page(page, server, "/launch", "Launch a search", FORM)
    page.get_by_label("budget", exact=True).fill("40")
    page.get_by_label("trials", exact=True).fill("2")
    sandbox = page.get_by_role("combobox", name="sandbox", exact=True)
    sandbox.click()
    sandbox.press("ArrowDown")  # a click focuses the combobox; the key opens its list
    page.get_by_role("option", name="process", exact=True).click()
    page.get_by_role("button", name="Launch").click()
    page.wait_for_url("**/run?run=*", timeout=120_000)
    run_id = page.url.split("run=")[1].split("&")[0]
    assert run_id not in before
    assert server.read.run(run_id).status == "running"

    # No reload from here on: the page refreshes itself while the run is running.
    metric = page.locator(METRIC).filter(has_text="candidates")
    deadline = time.monotonic() + 150
    while metric.inner_text().split()[-1].startswith("0/"):
        assert time.monotonic() < deadline, "the Run page showed no finished candidate"
        page.wait_for_timeout(1000)
    assert page.locator(EXCEPTION).count() == 0
    shot(page, "run-live")

    page.get_by_role("button", name="Stop").click()
    page.get_by_text("It can be resumed.").wait_for(timeout=120_000)
    shot(page, "run-stopped")
    stopped = server.read.run(run_id)
    assert stopped.status == "stopped" and stopped.resumable
    assert page.get_by_role("button", name="Resume").count() == 1


def test_a_tune_study_shows_its_pareto_front(tuned_server: Server, page: Any) -> None:
    (run,) = tuned_server.read.runs()
    study = tuned_server.read.study(run.run_id)
    assert study is not None and len(study.front()) > 1, "a front with a trade-off to draw"
    open_page(page, tuned_server, f"/run?run={run.run_id}", "Run", VEGA)
    click_tab(page, "Study")
    page.get_by_text(f"Optuna study {study.study} of fcfs").wait_for()
    assert page.locator(VEGA).filter(visible=True).count() >= 1
    shot(page, "run-study")
