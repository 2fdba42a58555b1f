"""The documentation site: `mkdocs build --strict` passes (broken links, missing pages and missing results
fail it), the generated CLI reference lists every command and flag that `crucible ... --help` prints, and
the built home page and a target page open in headless Chromium, with screenshots in tests/artifacts/."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from headless import chromium

from search.cli import main

ROOT = Path(__file__).resolve().parents[2]
CRUCIBLE = Path(sys.executable).with_name("crucible")
REQUIRE_DOCS = "CRUCIBLE_REQUIRE_DOCS"
"""Set to 1 (as .ci/run does) to fail, not skip, when the docs extra is missing."""
ARTIFACTS = ROOT / "tests" / "artifacts"


def _reference() -> Any:
    """docs/reference.py, the generator of the reference pages, loaded by path (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built strictly into a temporary folder."""
    missing = [m for m in ("mkdocs", "material", "mkdocs_gen_files") if find_spec(m) is None]
    if missing:
        if os.environ.get(REQUIRE_DOCS) == "1":
            pytest.fail(f"{REQUIRE_DOCS}=1 but the docs extra is missing: {', '.join(missing)}")
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return folder


@pytest.mark.docs
def test_the_site_builds_strictly_with_the_generated_pages(site: Path) -> None:
    for page in ("index.html", "reference/cli/index.html", "reference/config/index.html"):
        assert (site / page).is_file(), page
    targets = (site / "reference" / "targets" / "index.html").read_text()
    assert "block_hit_rate" in targets and "slo_attainment" in targets
    results = (site / "results" / "index.html").read_text()
    assert "{{ result" not in results and "at commit" in results


def _help(words: list[str]) -> str:
    """What `crucible WORDS --help` prints: the top level in a real process, the rest through the same
    entry point in this one (a process each would cost seconds of imports per command)."""
    if not words:
        done = subprocess.run(
            [str(CRUCIBLE), "--help"], capture_output=True, text=True, timeout=120, check=True
        )
        return done.stdout
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*words, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


def _subcommands(text: str) -> list[str]:
    """The subcommands a help text lists: the lines indented four spaces under its positional arguments."""
    section = text.split("positional arguments:", 1)[1].split("\n\n", 1)[0] if "positional" in text else ""
    return [line.split()[0] for line in section.splitlines() if re.match(r"^    \S", line)]


def _flags(text: str) -> set[str]:
    """Every flag the usage lines name."""
    usage = text.split("\n\n", 1)[0]
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", usage))


def _printed(words: list[str]) -> Iterator[tuple[tuple[str, ...], set[str]]]:
    """Each command reachable from `crucible WORDS --help`, with the flags its help prints."""
    text = _help(words)
    yield ("crucible", *words), _flags(text) | {"-h", "--help"}
    for sub in _subcommands(text):
        yield from _printed([*words, sub])


def test_the_cli_reference_lists_every_command_and_flag_the_help_prints() -> None:
    page = _reference().cli_page()
    sections = dict(re.findall(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", page, flags=re.MULTILINE | re.DOTALL))
    printed = dict(_printed([]))
    assert len(printed) > 20, sorted(printed)
    for command, flags in printed.items():
        name = " ".join(command)
        assert name in sections, f"the CLI reference lacks `{name}`"
        missing = sorted(f for f in flags if f"`{f}`" not in sections[name])
        assert not missing, f"`{name}`: the reference lacks {missing}"


def test_every_crucible_toml_key_of_the_example_is_in_the_config_reference() -> None:
    page = _reference().config_page()
    keys, table = set(), ""
    for line in (ROOT / "crucible.toml.example").read_text().splitlines():
        header = re.match(r"^#?\s*\[+([\w.]+)\]+", line)
        key = re.match(r"^#?\s*([a-z_]+)\s*=", line)
        if header:
            table = header.group(1)
        elif key and not table.startswith("options."):  # a target's options: the targets reference
            keys.add(key.group(1))
    assert keys and all(f"`{k}`" in page for k in keys), sorted(k for k in keys if f"`{k}`" not in page)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.mark.docs
@pytest.mark.browser
def test_the_home_page_and_a_target_page_open_in_a_browser(site: Path, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 1600})
    ARTIFACTS.mkdir(exist_ok=True)
    for path, heading, shot in (
        ("index.html", "Crucible", "docs-home.png"),
        ("targets/kv/index.html", "kv: prefix KV-cache eviction", "docs-target-kv.png"),
    ):
        page.goto((site / path).as_uri())
        page.get_by_role("heading", name=heading, level=1).wait_for()
        assert page.locator("nav.md-nav").count() > 0, f"{path}: no Material navigation"
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    assert page.locator("table").count() > 0, "the kv page shows no table of figures"
    page.close()
