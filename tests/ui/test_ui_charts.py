"""What the charts draw, from their Vega-Lite specs: no two measurements share a bar."""

from __future__ import annotations

import pandas as pd

from ui import charts

TAIL = "trace.jsonl@2000[1675:2500] warm"


def test_the_metric_chart_draws_the_tail_as_tuned_and_re_tuned_apart() -> None:
    frame = pd.DataFrame(
        [
            {"policy": policy, "instance": TAIL, "role": role, "metric": "block_hit_rate", "value": value}
            for policy, role, value in [
                ("found", "tail", 0.10),
                ("found", "tail-retuned", 0.11),
                ("lru", "tail", 0.05),
                ("lru", "tail-retuned", 0.05),
            ]
        ]
    )
    spec = charts.metric_chart(frame, "block_hit_rate", "found").to_dict()
    facet = spec["encoding"]["row"]["field"]
    (drawn,) = spec["datasets"].values()
    bars = pd.DataFrame(drawn)
    assert not bars.duplicated([facet, "policy"]).any(), "a bar stacks two measurements"
    assert set(bars[facet]) == {f"{TAIL} · tail", f"{TAIL} · tail-retuned"}
