"""A serving run's page shows each instance's queue and hit rate over time, the best candidate's beside the
best baseline's, as the store keeps them; a run of a target that keeps none has no such tab."""

from __future__ import annotations

from search import cli
from search.store.readmodel import ReadModel
from search.store.store import Store, open_engine


def test_a_serving_run_shows_its_fleet_over_time(tmp_path, open_page, seeded) -> None:
    url = f"sqlite:///{tmp_path / 'serving.db'}"
    flags = ["--set", "requests=0:300", "--set", "instances=3", "--sandbox", "process", "--trials", "2"]
    cli.main(["search", "--target", "serving", "--db", url, "--budget", "3", "--seed", "0", *flags])
    (run,) = ReadModel(Store(open_engine(url, create=False))).runs()
    at = open_page(url, "views/run.py", run=run.run_id)
    assert [t.label for t in at.tabs][-1] == "Over time"
    (chart,) = [c for c in at.get("vega_lite_chart") if "seconds into the window" in str(c.proto.spec)]
    assert all(f'"field": "{f}"' in str(chart.proto.spec) for f in ("lane", "series", "policy", "value"))
    read = ReadModel(Store(open_engine(url, create=False)))
    best = max((c for c in read.candidates(run.run_id) if c.score is not None), key=lambda c: c.score)
    (kept,) = [e for e in best.evaluations if e.role == "eval"]
    assert {name: len(lanes) for name, lanes in kept.timelines.items()} == {"queued": 3, "hit_rate": 3}
    assert len(kept.timelines["queued"][0]) == 48 and kept.step_s > 0
    assert not any(k.startswith("timeline.") for k in kept.metrics), "figures over time are not metrics"
    kv = open_page(seeded.url, "views/run.py", run=seeded.finished.run_id)
    assert "Over time" not in [t.label for t in kv.tabs]
