"""Does the head choose what the tail rewards? A held-out run's candidates, and files, on head and tail.

Run from the repository root after `crucible search ... --holdout SHARE --db URL`:
`python bench/holdout_transfer.py --db URL RUN [FILE ...] [--trials 32] [--top 5] [--record]`;
`--quick` makes its own run first (a held-out kv search of 2 candidates on `gen:chat:1`, 2 trials each, in a
temporary store) and tunes bench/policies/found_kv.py on it, with 2 trials.
Every candidate the run evaluated on its whole head (with the constants tuned on the head's train share)
is scored on the held-out tail with those constants, as the run scores its best (warm where the run's
split is), and on the head's part after the train share, warm (what `--select unseen` ranks on). It prints
the rank correlation (Spearman) of the head and tail scores over those candidates, where the head's best,
the unseen part's best and the tail's best rank on the others, and the top of each order. Each
FILE (a heuristic written by hand, say) is tuned on the head's train share as a candidate is, scored on the
head and the tail, and re-tuned on the whole tail as the run re-tunes its best. Ratios are against the best
non-oracle baseline on each window, from the run's own held-out table (`crucible runs show RUN`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _bench
import numpy as np

import targets
from sandbox.job import Job, Result, Tuning
from sandbox.process import ProcessSandbox
from search.cli import main as crucible
from search.errors import UserError
from search.evaluation import read_program
from search.loop.holdout import WINDOW_OPTION, retune_job, tail_scoring
from search.loop.selection import run_instances
from search.store.readmodel import ReadModel
from search.store.store import Store, StoreError, open_engine
from search.terms import BASELINE, UNSEEN, Split


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1 (smallest), ties sharing their mean rank, as Spearman's coefficient wants."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def metrics_of(result: Result) -> list[dict[str, float]]:
    """The metrics of each eval instance of a job, in the job's order."""
    if result.status != "ok":
        raise SystemExit(f"a job failed: {result.status}: {result.message}")
    return [i.metrics for i in result.instances if i.role == "eval"]


def gap(metrics: dict[str, float]) -> str:
    """The share of the LRU-to-Belady gap, where the target reports it (kv)."""
    return f", gap {metrics['gap_closed']:.3f}" if "gap_closed" in metrics else ""


QUICK_SEARCH = [
    "search",
    "--target",
    "kv",
    "--workload",
    "gen:chat:1",
    "--capacity",
    "300",
    "--holdout",
    "0.33",
    "--budget",
    "2",
    "--trials",
    "2",
    "--sandbox",
    "process",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="a run of `crucible search --holdout` (made by --quick)")
    parser.add_argument("files", nargs="*", help="heuristic files to tune on the head and score on the tail")
    parser.add_argument("--db", default="sqlite:///crucible.db", help="the run's store URL")
    parser.add_argument("--trials", type=int, default=32, help="Optuna trials to tune each file (head, tail)")
    parser.add_argument("--top", type=int, default=5, help="candidates shown from the top of each order")
    parser.add_argument("--workers", type=int, default=2)
    args, session = _bench.start(parser)
    with tempfile.TemporaryDirectory(prefix="crucible-holdout-") as folder:
        if session.quick:
            args.db, args.trials = f"sqlite:///{folder}/quick.db", 2
            args.files = args.files or [str(_bench.ROOT / "bench" / "policies" / "found_kv.py")]
            crucible([*QUICK_SEARCH, "--db", args.db])
            args.run = ReadModel(Store(open_engine(args.db, create=False))).runs()[0].run_id
        if args.run is None:
            parser.error("name a run of `crucible search --holdout` (or pass --quick)")
        session.save(transfer(args))


def transfer(args: argparse.Namespace) -> dict[str, object]:
    """Print how the run's candidates and the files score on head and tail; return the figures."""

    try:
        read = ReadModel(Store(open_engine(args.db, create=False)))
        info = read.run(args.run)
    except (StoreError, UserError) as exc:
        raise SystemExit(str(exc)) from None
    report = read.report(info.run_id).holdout
    if report is None:
        raise SystemExit(f"run {info.run_id} holds out no tail (search with --holdout)")
    store = read.store
    run = store.run(info.run_id)
    assert run is not None
    config = json.loads(run.config)
    target = targets.load(run.target)
    try:  # every file checked before anything runs: one line for a file outside the allowed subset
        sources = {file: read_program(target, Path(file)).source for file in args.files}
    except UserError as exc:
        raise SystemExit(str(exc)) from None
    metric, sign = target.objective.metric, (1.0 if target.objective.direction == "maximize" else -1.0)
    options = {k: v for k, v in config["options"].items() if k != WINDOW_OPTION}
    cut = Split.from_json(config["holdout"])
    head = target.instances(config["workload"], {**options, WINDOW_OPTION: cut.head})
    tail = tail_scoring(target, config["workload"], options, cut)
    classic = [r for r in report.rows if r.kind != "found" and not r.oracle]
    best_head = max(sign * r.head for r in classic if r.head is not None) * sign
    best_tail = max(sign * r.tail for r in classic if r.tail is not None) * sign
    print(f"run {info.run_id}: {target.name} on {Path(config['workload']).name}, {json.dumps(options)}")
    print(
        f"head {cut.head}, tail {cut.tail}{' warm' if cut.warm else ''}; best non-oracle baseline: "
        f"{best_head:.4f} on the head, {best_tail:.4f} on the tail ({metric})"
    )

    sandbox = ProcessSandbox()
    rows = [r for r in store.candidates(info.run_id) if r.status == "evaluated" and r.score is not None]
    rows = [r for r in rows if r.proposer != BASELINE]
    unseen = [
        i for i in run_instances(target, config["workload"], config["options"], UNSEEN) if i.role == "eval"
    ]
    jobs = [Job(target.name, r.source, (*tail, *unseen), params=json.loads(r.params or "{}")) for r in rows]
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        scored_both = [metrics_of(res) for res in pool.map(sandbox.run, jobs)]
    tail_metrics = [m[0] for m in scored_both]
    tails = [m[metric] for m in tail_metrics]
    heads = np.array([sign * r.score for r in rows])
    scored = np.array([sign * t for t in tails])
    after = np.array([sign * m[1][metric] for m in scored_both])
    best, top, picked = int(np.argmax(heads)), int(np.argmax(scored)), int(np.argmax(after))
    rho = spearman(heads, scored)
    print(f"{len(rows)} candidates evaluated on the whole head; Spearman(head, tail) {rho:.3f}")
    print(f"Spearman(the head's unseen part, tail) {spearman(after, scored):.3f}")
    data: dict[str, object] = {
        "run": f"{info.run_id}: {target.name} on {Path(config['workload']).name}",
        "split": f"head {cut.head}, tail {cut.tail}{' warm' if cut.warm else ''}",
        "rank correlation": [
            {
                "candidates": len(rows),
                "Spearman(head, tail)": rho,
                "Spearman(unseen part, tail)": spearman(after, scored),
            }
        ],
    }
    picks, files = [], []
    for label, i in (("the head's best", best), ("the unseen part's best", picked), ("the tail's best", top)):
        head_rank, tail_rank = 1 + int(np.sum(heads > heads[i])), 1 + int(np.sum(scored > scored[i]))
        print(
            f"{label}, #{rows[i].id}: head {rows[i].score:.4f} ({rows[i].score / best_head:.3f}x, rank"
            f" {head_rank}), tail {tails[i]:.4f} ({tails[i] / best_tail:.3f}x{gap(tail_metrics[i])},"
            f" rank {tail_rank})"
        )
        picks.append(
            {
                "pick": label,
                "candidate": rows[i].id,
                "head": rows[i].score,
                "head x best baseline": rows[i].score / best_head,
                "head rank": head_rank,
                "tail": tails[i],
                "tail x best baseline": tails[i] / best_tail,
                "tail rank": tail_rank,
            }
        )
    data["picks"] = picks
    for title, order in (("by head", np.argsort(-heads)), ("by tail", np.argsort(-scored))):
        shown = ", ".join(f"#{rows[i].id} {rows[i].score:.4f}/{tails[i]:.4f}" for i in order[: args.top])
        print(f"top {args.top} {title} (head/tail): {shown}")

    for file, source in sources.items():
        tuned = sandbox.run(Job(target.name, source, (*head, *tail), tuning=Tuning(args.trials, seed=0)))
        on_head, on_tail = metrics_of(tuned)
        retune = retune_job(target, source, tuned.params, tail, Tuning(args.trials, seed=1))
        refit = metrics_of(sandbox.run(retune))[0]
        retuned = refit if sign * refit[metric] >= sign * on_tail[metric] else on_tail
        print(
            f"{file}: head {on_head[metric]:.4f} ({on_head[metric] / best_head:.3f}x),"
            f" tail {on_tail[metric]:.4f} ({on_tail[metric] / best_tail:.3f}x{gap(on_tail)}),"
            f" re-tuned on the tail {retuned[metric]:.4f}"
            f" ({retuned[metric] / best_tail:.3f}x{gap(retuned)})"
        )
        files.append(
            {
                "file": file,
                "head": on_head[metric],
                "head x best baseline": on_head[metric] / best_head,
                "tail": on_tail[metric],
                "tail x best baseline": on_tail[metric] / best_tail,
                "re-tuned on the tail": retuned[metric],
                "re-tuned x best baseline": retuned[metric] / best_tail,
            }
        )
    data["files"] = files
    return data


if __name__ == "__main__":
    main()
