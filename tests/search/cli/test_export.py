"""`crucible export` and `crucible runs best --export`, without the engines: what is written, what is
refused. tests/engines runs the written modules inside SGLang and vLLM."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import targets
from search.cli import main
from targets.export import reads
from verifiers.compiler import PLAIN_PRELUDE, plain_source, to_python
from verifiers.static import check

ROOT = Path(__file__).resolve().parents[3]
FOUND_KV = ROOT / "bench" / "policies" / "found_kv.py"
FOUND_BATCHING = ROOT / "bench" / "policies" / "found_batching.py"
OURS = {"search", "targets", "verifiers", "sandbox", "ui"}
EVERY_FORM = '''"""Uses every form a back end translates."""
PARAMS = {"w": (0.5, 4.0, "log", 2.0), "k": (1.0, 9.0)}


def priority(b, p):
    x = clamp(b.hits, 0.0, p.k) ** 1.5 + floor(b.age / 7.0) - ceil(b.depth / 3.0)
    for i in range(3):
        x += i * log1p(b.tokens) / (1 + i)
    if b.age > p.w and not b.hits < 1 or b.depth == 2:
        x -= exp(-abs(b.age)) * min(b.tokens, b.depth, 4.0)
    else:
        x = max(x, sqrt(b.lifetime)) % 11.0
    return x if b.tokens != 3 else -x // 2
'''


def error_line(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return int(exit_info.value.code or 0), err[0]


def plain(source: str):
    """The function as the exported module runs it: PLAIN_PRELUDE and plain_source, nothing of Crucible."""
    namespace: dict = {}
    exec("import math\n" + PLAIN_PRELUDE + plain_source(check(source, [_signature()]), "priority"), namespace)
    return namespace["priority"]


def _signature():
    return targets.load("kv").signatures[0]


@settings(max_examples=300, deadline=None)
@given(
    hits=st.integers(0, 40),
    age=st.floats(0.0, 5e3),
    lifetime=st.floats(0.0, 5e3),
    depth=st.integers(1, 30),
    tokens=st.integers(1, 512),
)
def test_the_exported_function_computes_what_crucible_computes(
    hits: int, age: float, lifetime: float, depth: int, tokens: int
) -> None:
    from types import SimpleNamespace

    state = {"hits": hits, "age": age, "lifetime": lifetime, "depth": depth, "tokens": tokens}
    for source in (EVERY_FORM, FOUND_KV.read_text()):
        program = check(source, [_signature()])
        state["since_evicted"], state["last_access"] = age + 1.0, lifetime
        expected = to_python(program, "priority")(state, {})
        got = plain(source)(
            SimpleNamespace(**{k: float(v) for k, v in state.items()}), SimpleNamespace(**program.defaults())
        )
        assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_every_exported_feature_is_a_feature_of_its_target() -> None:
    seen = set()
    for name in targets.names():
        target = targets.load(name)
        for engine, export in target.exports().items():
            assert set(export.features) <= set(target.registry(export.signature).names), (name, engine)
            seen.add(engine)
    assert seen == {"sglang", "vllm", "router"}


@pytest.mark.parametrize(("source", "engine"), [(FOUND_KV, "sglang"), (FOUND_BATCHING, "vllm")])
def test_export_writes_a_self_contained_installable_module(
    tmp_path: Path, source: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["export", str(source), "--to", engine, "-o", str(tmp_path)])
    module = tmp_path / f"crucible_{source.stem}.py"
    text = module.read_text()
    imported = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= {"math", "time", "weakref", "types", engine}, imported
    assert not imported & OURS
    program = check(
        source.read_text(), [_signature()] if engine == "sglang" else targets.load("batching").signatures
    )
    for name, value in program.defaults().items():
        assert f'"{name}": {value!r},' in text  # the tuned constants, unrounded
    project = (tmp_path / "pyproject.toml").read_text()
    assert f'py-modules = ["crucible_{source.stem}"]' in project
    assert ('"sglang.srt.plugins"' in project) == (engine == "sglang")
    assert "load:" in capsys.readouterr().err

    main(["export", str(source), "--to", engine])  # no --output: the same module on stdout
    assert capsys.readouterr().out == text


def test_a_feature_the_engine_lacks_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lacking = tmp_path / "population.py"
    lacking.write_text(
        '"""Older than most."""\n\n\ndef priority(b, p):\n    return b.age - b.pop_age_p50 + b.hits\n'
    )
    code, line = error_line(capsys, "export", str(lacking), "--to", "sglang")
    assert code == 2
    assert "reads b.pop_age_p50, which SGLang 0.5.23's radix tree node does not expose" in line
    assert "it exposes: now, last_access" in line
    assert "Traceback" not in line

    since_run = tmp_path / "since_run.py"
    since_run.write_text('"""Stalled first."""\n\n\ndef priority(r, p):\n    return r.since_run\n')
    code, line = error_line(capsys, "export", str(since_run), "--to", "vllm")
    assert code == 2 and "reads r.since_run, which vLLM 0.34.0's request does not expose" in line


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert error_line(capsys, "export", str(tmp_path / "missing.py"), "--to", "sglang")[0] == 2
    broken = tmp_path / "broken.py"
    broken.write_text("def priority(b, p):\n    import os\n    return 0\n")
    code, line = error_line(capsys, "export", str(broken), "--to", "sglang")
    assert code == 2 and "line 2" in line
    code, line = error_line(capsys, "export", str(FOUND_KV), "--to", "sglang", "--target", "batching")
    assert code == 2 and "does not export to sglang" in line
    code, line = error_line(capsys, "export", str(FOUND_KV), "--to", "sglang", "--name", "not-a-name")
    assert code == 2 and "not a Python module name" in line


def test_reads_lists_each_feature_once_in_source_order() -> None:
    program = check(FOUND_KV.read_text(), [_signature()])
    assert reads(program, "priority") == ("tokens", "hits", "since_evicted", "last_access")


def test_runs_best_exports_the_best_of_a_run(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    search = [sys.executable, "-m", "search.cli", "search", "--workload", "gen:chat:1", "--capacity", "300"]
    done = subprocess.run(
        [*search, "--budget", "2", "--trials", "1", "--json", "--db", db],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["run_id"]
    best = subprocess.run(
        [sys.executable, "-m", "search.cli", "runs", "best", run, "--db", db],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    folder = tmp_path / "exported"
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli",
            "runs",
            "best",
            run,
            "--export",
            "sglang",
            "-o",
            str(folder),
            "--db",
            db,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    module = (folder / f"crucible_{run}.py").read_text()
    assert plain_source(check(best, [_signature()]), "priority") in module
    assert f"run {run}" in module
