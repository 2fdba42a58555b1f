"""Which part of Crucible may import which (docs/concepts/architecture.md), read from the source.

Every import statement of every module of the five packages counts, those inside functions too (a lazy
import is still a dependency), with relative imports resolved. The rules:
ui -> search; search -> sandbox, targets, verifiers; sandbox -> targets, verifiers; targets -> verifiers;
verifiers -> none of ours. Inside targets/, the shared parts (base.py, reference_engine/, costmodel/,
deployments/ and the other modules beside base.py) import no target; a target reuses another's mechanism only
through its public names (kv-tiered the kv prefix cache's parts, batching-capacity the batching target),
never a private one; and nothing outside targets/ imports a target, the registration in targets/__init__.py
aside. Inside search/, the layers run one way (LAYERS); the UI reaches search only through the run service.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ui", "search", "sandbox", "targets", "verifiers")
ALLOWED: dict[str, set[str]] = {
    "ui": {"search"},
    "search": {"sandbox", "targets", "verifiers"},
    "sandbox": {"targets", "verifiers"},
    "targets": {"verifiers"},
    "verifiers": set(),
}
SHARED_TARGET_PARTS = {"reference_engine", "costmodel", "deployments"}
"""Folders of targets/ that are the shared mechanism, not a target."""
REGISTRY = "targets"
"""targets/__init__.py registers the targets by name, so it alone may import them from outside."""
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (
        "search.loop",
        "search.store",
        "the loop keeps its own records; the service's journal maps them to rows",
    ),
    ("search.store", "search.loop", "the store knows rows, not the loop"),
    ("search.proposers", "search.loop", "a proposer is handed what it needs"),
    ("search.settings", "search.proposers", "the proposer registry supplies its own setting"),
    ("search.proposers", "search.settings", "a proposer declares its settings as Options"),
    ("targets.costmodel", "targets.reference_engine", "the engine is measured into the cost model's format"),
    ("targets.costmodel", "targets.deployments", "a deployment is priced with the cost model, not inside it"),
    ("search.ci", "search.loop", "the CI job drives runs through the service"),
    ("search.ci", "search.proposers.llm", "the CI job gets models from the proposer registry"),
)
"""Layers inside a part, (importer, imported, why): a module under the first never imports the second."""
UI_REACHES = ("search.service", "search.errors")
"""What of search the UI may import: the run service (and its records) and the errors it raises."""


def target_packages() -> set[str]:
    """Every subpackage of targets/ that is a target (kv, batching, dit, ...), found on disk."""
    folders = (p.parent.name for p in (ROOT / "targets").glob("*/__init__.py"))
    return {name for name in folders if name not in SHARED_TARGET_PARTS}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the source of `module`; `from x import y` counts
    x.y as well, since y may be a submodule (`from . import kv`)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            imported = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, imported
            for alias in node.names:
                yield node.lineno, f"{imported}.{alias.name}"


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Each import statement of `module` that the rules forbid, once, as 'line imports name (why)'."""
    top = module.split(".")[0]
    own = module.split(".")[1] if top == "targets" and "." in module else None
    found: dict[int, str] = {}
    for line, imported in imports(source, module, is_package):
        if line in found:
            continue
        parts = imported.split(".")
        if parts[0] in PACKAGES and parts[0] != top and parts[0] not in ALLOWED[top]:
            allowed = ", ".join(sorted(ALLOWED[top])) or "nothing of ours"
            found[line] = f"{line} imports {imported} ({top} may import {allowed})"
        target = parts[1] if parts[0] == "targets" and len(parts) > 1 else None
        if target in target_packages() and target != own and module != REGISTRY:
            if top != "targets" or own not in target_packages():
                found[line] = f"{line} imports {imported} (only targets/{target}/ and the registry may)"
            elif any(part.startswith("_") for part in parts[2:]):
                found[line] = f"{line} imports {imported} (another target's private name)"
        for importer, layer, why in FORBIDDEN:
            if _under(module, importer) and _under(imported, layer):
                found[line] = f"{line} imports {imported} ({why})"
        reaches = imported == "search" or any(_under(imported, s) for s in UI_REACHES)
        if top == "ui" and parts[0] == "search" and not reaches:
            found[line] = f"{line} imports {imported} (the UI reaches search through search.service)"
    return list(found.values())


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_what_its_part_may(path: Path) -> None:
    assert violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


def test_the_walk_sees_every_package_and_every_target() -> None:
    names = {module_name(p) for p in modules()}
    assert {
        "search.cli",
        "sandbox.worker",
        "targets.base",
        "verifiers.smt",
        "targets.reference_engine.model",
    } <= names
    assert {"kv", "batching"} <= target_packages()
    assert not target_packages() & SHARED_TARGET_PARTS


def test_a_shared_part_importing_a_target_is_caught_however_it_imports() -> None:
    lazy_relative = "def f():\n    from ..kv.trace import Trace\n"
    assert violations(lazy_relative, "targets.reference_engine.model") == [
        "2 imports targets.kv.trace (only targets/kv/ and the registry may)"
    ]
    assert violations("from targets import batching\n", "targets.base")
    assert violations("import targets.kv.target\n", "targets.costmodel.model")
    assert violations("from ..batching.trace import _parse\n", "targets.kv.reference"), (
        "another's private name"
    )
    assert violations("from targets.kv import _block\n", "targets.kv_tiered.cache"), "another's private name"
    assert violations("from targets.kv.target import KVTarget\n", "search.cli"), "the front end names none"


def test_what_the_rules_allow_passes() -> None:
    assert violations("from . import kv\nfrom .kv import KVTarget\n", "targets", is_package=True) == []
    assert violations("from .trace import Trace\nimport targets.base\n", "targets.kv.reference") == []
    assert (
        violations("from targets.reference_engine.model import Transformer\n", "targets.batching.reference")
        == []
    )
    assert violations("from search.service import open_service\n", "ui.app") == []
    assert violations("from targets.kv.eviction_heap import heap_push\n", "targets.kv_tiered.cache") == [], (
        "a target reuses another's mechanism through its public names"
    )


def test_the_layers_inside_a_part_run_one_way() -> None:
    assert violations("from search.store.tables import Candidate\n", "search.loop.search")
    assert violations("from search.loop.holdout import TAIL\n", "search.store.readmodel")
    assert violations("from search.loop.database import node_count\n", "search.proposers.evolve.proposer")
    assert violations("from search import proposers\n", "search.settings")
    assert violations("from search.settings import Setting\n", "search.proposers.base")
    assert violations("from targets.reference_engine import ops\n", "targets.costmodel.profiler")
    assert violations("from search.loop.selection import CHOICES\n", "ui.views.launch")
    assert violations("from search.cli.ui import serve\n", "ui.data")
    assert not violations("from search.errors import UserError\n", "ui.states")
    assert not violations(
        "from targets.costmodel.model import Profile\n", "targets.reference_engine.profiler"
    )


def test_an_import_against_the_direction_is_caught() -> None:
    assert violations("from search.loop.search import Search\n", "targets.kv.target")
    assert violations("import ui.app\n", "search.cli")
    assert violations("from sandbox.job import Job\n", "verifiers.smt")
    assert violations("from targets.base import Feature\n", "verifiers.properties")
    assert violations("from search import service\n", "sandbox.worker")


FRONT_ENDS = ("search.cli", "search.ci", "ui")
"""The front ends: they open stores and start runs through the run service, never the store itself."""
WRITERS = ("search.service", "search.store")
"""The only packages that may write runs: the run service, and the store it writes through."""
STORE_WRITES = frozenset(
    {
        "create_run",
        "add_candidate",
        "finish_candidate",
        "add_evaluations",
        "set_run_status",
        "start_run",
        "set_run_config",
    }
)
"""The store's methods that write runs (search/store/store.py)."""


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def store_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """A front end's import of the store (or its tables); anyone but the service and the store opening a
    store or calling one of its writes."""
    found: dict[int, str] = {}
    for line, imported in imports(source, module, is_package):
        if _within(module, FRONT_ENDS) and _within(imported, ("search.store",)):
            found.setdefault(line, f"{line} imports {imported} (a front end goes through search.service)")
        opens = imported in ("search.store.store.Store", "search.store.store.open_engine")
        if opens and not _within(module, WRITERS):
            found.setdefault(line, f"{line} imports {imported} (only the run service opens a store)")
    if not _within(module, WRITERS):
        for node in ast.walk(ast.parse(source)):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in STORE_WRITES:  # type: ignore[union-attr]
                found.setdefault(
                    node.lineno, f"{node.lineno} calls {node.func.attr} (only the service writes runs)"
                )  # type: ignore[union-attr]
    return list(found.values())


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_service_opens_a_store_and_writes_runs(path: Path) -> None:
    assert store_violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


def test_a_front_end_reaching_for_the_store_is_caught() -> None:
    assert store_violations("from search.store.readmodel import RunInfo\n", "search.cli.runs")
    assert store_violations("from search.store.tables import Run\n", "ui.views.launch")
    assert store_violations("from search.store.store import Store\n", "search.ci.pipeline")
    assert store_violations("from search.store.store import open_engine\n", "search.tune.study")
    assert store_violations("def f(store):\n    store.create_run('kv', {})\n", "search.tune.study")
    assert store_violations("def f(store):\n    store.finish_candidate(row, [])\n", "search.loop.search")
    assert not store_violations("from search.service import open_service\n", "ui.data")
    assert not store_violations("def f(store):\n    store.create_run('kv', {})\n", "search.service.runs")


def test_the_architecture_page_states_the_rule_this_test_enforces() -> None:
    """docs/concepts/architecture.md's table of which part may import which is ALLOWED, cell by cell."""
    page = (ROOT / "docs" / "concepts" / "architecture.md").read_text()
    table = page.split("## Which part may import which", 1)[1].split("\n\n", 2)[2]
    stated = {}
    for line in table.splitlines():
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] in PACKAGES:
            stated[cells[0]] = {w.strip("`,") for w in cells[1].split() if w.strip("`,") in PACKAGES}
    assert stated == ALLOWED
    assert all(f"`{reach}`" in page for reach in UI_REACHES)
