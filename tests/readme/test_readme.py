"""The README's commands, run as a new user runs them: from a folder of their own, with relative paths.

Every line of the README's plain code blocks that starts with `crucible` runs here, in order, in one fresh
working directory outside the repository (so `best.py` and `RUN` come from the commands before), except
the two set-up commands of "Two commands": the test command is what `.ci/run` runs, and the main job's
table is checked against what its command prints. The test shrinks the examples only as the README says:
a search runs with `--budget` at most BUDGET (one that states no budget gets BUDGET), each workload file
an example names (`trace.jsonl`, `azure.csv`...) is laid out as REQUESTS requests of its target's shipped
trace, and optional parts (`[--json]`) are left out. The process variant runs every command where no Docker
engine answers, as in a new user's first hour; the docker variant (marker docker) runs those whose outcome
depends on the backend where the engine and the image are up. The documentation's getting-started page,
guides, target pages and concepts (DOC_PAGES) are run the same way, each page in a fresh folder of its own; a
block with a language (```sh) is shown, not run, as those pages say.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import targets
from sandbox.base import SandboxUnavailable
from sandbox.docker import DockerSandbox

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOC_PAGES = [
    ROOT / "docs" / "getting-started.md",
    *(
        page
        for folder in ("guides", "targets", "concepts")
        for page in sorted((ROOT / "docs" / folder).glob("*.md"))
    ),
]
CRUCIBLE = Path(sys.executable).with_name("crucible")
BUDGET = int(os.environ.get("CRUCIBLE_README_BUDGET", "2"))
"""The most candidates a README search runs here (the README's figures state their own command)."""
REQUESTS = 300
"""How many requests of the target's shipped trace each workload file an example names holds."""
NO_ENGINE = "unix:///nonexistent/docker.sock"
REQUIRE_DOCKER = "CRUCIBLE_REQUIRE_DOCKER"
SET_UP = "python3 -m venv .venv"
"""The first set-up command starts so; the main job it ends with is checked against the first table."""
TEST_COMMAND = ".venv/bin/python -m pytest"
TIMEOUT_S = 600
ENGINE_TIMEOUT_S = 3600
"""`crucible validate` on the README's kv slice replays 1,500 requests on real kernels: 15 min when idle."""
NEEDS_DOCKER = ("--sandbox docker", "crucible sandbox build")
NEEDS_TORCH = ("crucible profile", "crucible validate")
NEEDS_LLM = ("--proposer llm", "--proposer mix")
RUNS_JOBS = ("search", "baselines", "eval", "tune", "validate", "sandbox", "ci")
"""Commands whose outcome depends on the sandbox backend; the docker variant runs these and `runs best`
(its file feeds the next eval), the process variant runs every command."""
NEEDS_CLUSTER = "--cluster tcp://SCHEDULER"
"""The README's scale-out line names hosts of the reader's own; tests/scale runs its flags against a
LocalCluster and PostgreSQL, and here the unreachable placeholder must be one line, exit 2."""
LLM_TEST = "tests/search/proposers/test_llm.py"
LLM_TESTS = f"{LLM_TEST} runs these flags against a local one"


@dataclass(frozen=True)
class Example:
    """One command of the README's code blocks, as written (its trailing comment aside)."""

    line: int
    text: str
    source: str = "README.md"

    @property
    def words(self) -> list[str]:
        """The command's words, its optional parts (`[--json]`) left out."""
        return shlex.split(re.sub(r"\s*\[[^\]]*\]", "", self.text))

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.text}"


def code_blocks(readme: str) -> Iterator[tuple[int, list[str]]]:
    """The plain fenced blocks (no language: commands and their output), each with its first line number."""
    block: list[str] | None = None
    start, language = 0, ""
    for number, line in enumerate(readme.splitlines(), 1):
        if not line.startswith("```"):
            if block is not None:
                block.append(line)
        elif block is None:
            block, start, language = [], number + 1, line[3:].strip()
        else:
            if not language:
                yield start, block
            block = None


def commands(readme: str, source: str = "README.md") -> list[Example]:
    """Every line of a plain block that runs crucible, or sets it up, with its trailing comment stripped."""
    found = []
    for start, lines in code_blocks(readme):
        for offset, line in enumerate(lines):
            text = re.sub(r"\s+#\s.*$", "", line).strip()
            if text.split(" ", 1)[0] in ("crucible", ".venv/bin/crucible") or text.startswith(
                (SET_UP, TEST_COMMAND)
            ):
                found.append(Example(start + offset, text, source))
    return found


EXAMPLES = commands(README.read_text())
SET_UP_LINE = next(e for e in EXAMPLES if e.text.startswith(SET_UP))
MAIN_JOB = Example(SET_UP_LINE.line, SET_UP_LINE.text.rsplit("&&", 1)[1].strip().removeprefix(".venv/bin/"))
RUNNABLE = [e for e in EXAMPLES if e.words[0] == "crucible"]


@dataclass
class Session:
    """One user's working directory: the files the examples name, the runs their searches made."""

    folder: Path
    env: dict[str, str]
    docker: bool
    budget: int | None = BUDGET
    """None: every search with the budget it states."""
    runs: list[tuple[str, str]] = field(default_factory=list)
    """(store, run id) of every search so far: RUN is the latest one in the store a command names."""

    def run(self, words: list[str]) -> subprocess.CompletedProcess[str]:
        engine = " ".join(words[:2]).startswith(NEEDS_TORCH)
        return subprocess.run(
            [str(CRUCIBLE), *words[1:]],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=ENGINE_TIMEOUT_S if engine else TIMEOUT_S,
            check=False,
        )

    def prepared(self, example: Example) -> list[str]:
        """The example's words with RUN as the latest run and the budget shrunk; its files laid out."""
        words = example.words
        if "RUN" in words:
            ran = [run for store, run in self.runs if store == _store(words)]
            if not ran:
                pytest.skip("no search has run in this store in this session yet (run the whole file)")
            words = [ran[-1] if w == "RUN" else w for w in words]
        if words[1] == "search" and "--resume" not in words and self.budget is not None:
            if "--budget" in words:
                at = words.index("--budget") + 1
                words[at] = str(min(int(words[at]), self.budget))
            else:
                words += ["--budget", str(self.budget)]
        beside = [w for w in words if w.startswith("../") and not (self.folder / w).exists()]
        if beside:  # data shipped beside a checkout (../shared/data), not with it
            pytest.skip(f"needs {beside[0]} beside the checkout")
        self.lay_out(words)
        return words

    def lay_out(self, words: list[str]) -> None:
        """Each workload file the command names and the folder lacks: a slice of its target's shipped trace,
        the n-th file of a kind the n-th slice (so `other.jsonl` differs from `trace.jsonl`)."""
        if "--workload" not in words:
            return
        name = words[words.index("--workload") + 1]
        path = self.folder / name
        if ":" in name or path.exists():  # a generator or a named workload, as absolute_workload reads it
            return
        target = words[words.index("--target") + 1] if "--target" in words else targets.names()[0]
        shipped = Path(targets.load(target).default_config()["workload"]).read_text().splitlines(True)
        header = shipped[:1] if shipped[0].startswith("TIMESTAMP") else []
        body = shipped[len(header) :]
        n = len(list(self.folder.glob(f"*{path.suffix}")))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(header + body[n * REQUESTS : (n + 1) * REQUESTS]))

    def new_run(self, words: list[str]) -> None:
        """Note the run a search just made (the newest in `crucible runs list --json` of its store)."""
        store = ["--db", _store(words)] if "--db" in words else []
        listed = json.loads(self.run(["crucible", "runs", "list", "--json", *store]).stdout)
        rows = listed if isinstance(listed, list) else listed.get("runs", [])
        ids = [str(r.get("run_id", r.get("id"))) for r in sorted(rows, key=lambda r: str(r["created_at"]))]
        new = [i for i in ids if i not in {run for _, run in self.runs}]
        assert new, f"no new run in `crucible runs list`: {ids}"
        self.runs.append((_store(words), new[-1]))


def _store(words: list[str]) -> str:
    """The store a command names (empty: the default one)."""
    return words[words.index("--db") + 1] if "--db" in words else ""


def _session(folder: Path, docker: bool, budget: int | None = BUDGET) -> Session:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if not docker:
        env["DOCKER_HOST"] = NO_ENGINE  # a new user's machine: no engine answers
    work = folder / "work"
    work.mkdir()
    data = ROOT.parent / "shared"
    if data.is_dir():  # examples name ../shared/data/... relative to a checkout beside the shared data
        (folder / "shared").symlink_to(data)
    return Session(work, env, docker, budget)


@pytest.fixture(scope="module")
def on_process(tmp_path_factory: pytest.TempPathFactory) -> Session:
    return _session(tmp_path_factory.mktemp("readme-process"), docker=False)


@pytest.fixture(scope="module")
def on_docker(tmp_path_factory: pytest.TempPathFactory) -> Session:
    try:
        DockerSandbox()
    except SandboxUnavailable as exc:
        if os.environ.get(REQUIRE_DOCKER) == "1":
            pytest.fail(f"{REQUIRE_DOCKER}=1 but the Docker backend cannot run: {exc}")
        pytest.skip(f"the Docker backend cannot run here: {exc}")
    return _session(tmp_path_factory.mktemp("readme-docker"), docker=True)


def _params(docker: bool, examples: list[Example] = RUNNABLE) -> list[object]:
    params = []
    for example in examples:
        if docker and example.words[1] not in RUNS_JOBS and example.words[1:3] != ["runs", "best"]:
            continue
        marks: list[pytest.MarkDecorator] = []
        if any(flag in example.text for flag in NEEDS_LLM):
            marks.append(
                pytest.mark.skip(
                    reason="needs an OpenAI-compatible endpoint (tests/search/proposers/test_llm.py)"
                )
            )
        if example.text.startswith(NEEDS_TORCH):
            marks += [pytest.mark.slow, pytest.mark.torch]
        page = "" if example.source == "README.md" else Path(example.source).stem + "-"
        params.append(pytest.param(example, id=f"{page}line{example.line}", marks=marks))
    return params


def check(session: Session, example: Example) -> subprocess.CompletedProcess[str]:
    """Run the example; it succeeds, or, where it needs what the session lacks, fails in one line."""
    if example.text.startswith(NEEDS_TORCH):
        pytest.importorskip("torch")
    words = session.prepared(example)
    done = session.run(words)
    said = f"{example}\nran: {shlex.join(words)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr, said
    if not session.docker and any(need in example.text for need in NEEDS_DOCKER):
        assert done.returncode == 2, said  # no engine: one line that says so
        assert done.stderr.strip().splitlines()[-1].startswith("crucible: error: "), said
        assert "Docker engine" in done.stderr, said
        return done
    if NEEDS_CLUSTER in example.text:
        assert done.returncode == 2, said
        assert done.stderr.strip().splitlines()[-1].startswith("crucible: error: "), said
        assert "Dask scheduler" in done.stderr, said
        return done
    assert done.returncode == 0, said
    for line in done.stderr.splitlines():
        if line.startswith("sandbox: "):
            assert line.split()[1] == ("docker" if session.docker else "process"), said
    if words[1] == "search" and "--resume" not in words:
        session.new_run(words)
    return done


@pytest.mark.parametrize("example", _params(docker=False))
def test_the_readme_command_works_from_a_users_folder(on_process: Session, example: Example) -> None:
    check(on_process, example)


DOC_EXAMPLES = [
    e
    for page in DOC_PAGES
    for e in commands(page.read_text(), str(page.relative_to(ROOT)))
    if e.words[0] == "crucible"
]


@pytest.fixture(scope="module")
def doc_sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Session]:
    """One user's folder per documentation page, made when its first command runs."""
    return {}


def shown_output(page: str, example: Example) -> str | None:
    """What the page says the command printed: the ```text block that follows its own block, if any,
    before any other command."""
    lines = page.splitlines()
    after = lines[example.line :]
    fence = next((i for i, line in enumerate(after) if line.startswith("```")), None)
    if fence is None:
        return None
    rest = after[fence + 1 :]
    start = next((i for i, line in enumerate(rest) if line.startswith("```")), None)
    if (
        start is None
        or rest[start].strip() != "```text"
        or any(line.startswith("crucible ") for line in rest[:start])
    ):
        return None
    end = next(i for i, line in enumerate(rest[start + 1 :], start + 1) if line.startswith("```"))
    return "\n".join(rest[start + 1 : end])


@pytest.mark.parametrize("example", _params(docker=False, examples=DOC_EXAMPLES))
def test_the_docs_command_works_from_a_users_folder(
    doc_sessions: dict[str, Session], tmp_path_factory: pytest.TempPathFactory, example: Example
) -> None:
    if example.source not in doc_sessions:
        doc_sessions[example.source] = _session(tmp_path_factory.mktemp("docs-process"), docker=False)
    done = check(doc_sessions[example.source], example)
    shown = shown_output((ROOT / example.source).read_text(), example)
    if shown is not None:  # the page's figures are what the command prints, row by row
        assert table(done.stdout) == table(shown), f"{example}: {done.stdout}"


@pytest.mark.docker
@pytest.mark.parametrize("example", _params(docker=True))
def test_the_readme_command_works_on_docker(on_docker: Session, example: Example) -> None:
    check(on_docker, example)


def table(text: str) -> dict[str, list[str]]:
    """The rows of the first box-drawn table in `text`, by their first cell (the header row included)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[┃│]", line)[1:-1]]
        if cells:
            rows[cells[0]] = cells[1:]
        elif rows and line.startswith("└"):
            break
    return rows


def readme_table() -> dict[str, list[str]]:
    after = README.read_text().split(SET_UP_LINE.text, 1)[1]
    return table(after)


def test_the_first_tables_baselines_are_what_the_main_job_prints(on_process: Session) -> None:
    """The baselines do not depend on the budget: their rows must match the README's to the last digit."""
    done = check(on_process, MAIN_JOB)
    printed, shown = table(done.stdout), readme_table()
    assert printed["policy"] == shown["policy"]
    for policy, cells in shown.items():
        if not policy.startswith("found"):
            assert printed.get(policy) == cells, f"{policy}: README {cells}, printed {printed.get(policy)}"


def test_the_main_jobs_result_exports_into_the_engine_it_was_searched_for(tmp_path: Path) -> None:
    """The README's first command, then its best, then `crucible export` as the README says: it runs."""
    session = _session(tmp_path, docker=False)
    check(session, MAIN_JOB)
    engine = MAIN_JOB.words[MAIN_JOB.words.index("--for") + 1]
    for words in (["crucible", "runs", "best", session.runs[-1][1], "--output", "best.py"],
                  ["crucible", "export", "best.py", "--to", engine]):  # fmt: skip
        done = session.run(words)
        assert done.returncode == 0, f"{shlex.join(words)}\n{done.stderr}"
    assert "register" in done.stdout, "a module the engine loads, on stdout"
    assert f"`crucible export best.py --to {engine}`" in README.read_text()


@pytest.mark.slow
def test_the_first_table_is_what_the_main_job_prints_in_full(tmp_path: Path) -> None:
    """As written (the whole budget): every row, the found heuristic's included."""
    done = check(_session(tmp_path, docker=False, budget=None), MAIN_JOB)
    assert table(done.stdout) == readme_table()


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    (readme_test,) = [e.text for e in EXAMPLES if e.text.startswith(TEST_COMMAND)]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    steps = [line for line in ci if line and not line.startswith("#")]
    assert steps[-1] == readme_test


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    """Read in two minutes: at most 200 lines, the two commands on the first screen, no dead link."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"{len(lines)} lines: history and analyses belong in docs/"
    first = "\n".join(lines[:40])
    assert SET_UP in first and TEST_COMMAND in first
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert links, "the front page links to the documentation"
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), f"README links to {link}, which is not in the repository"
