"""Bar charts of recorded results, drawn as inline SVG when the site builds (docs/results_hook.py): the found
policy, each baseline and the oracle bound on one axis, one bar each, or one bar per series (held-out
seeds) side by side. Plain SVG, so the page needs no script and the chart cannot disagree with its table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640
LABEL = 150
"""Pixels left of the axis for the policies' names."""
ROW = 22
BAR = 16
COLOURS = {"found": "#e64a19", "baseline": "#90a4ae", "oracle": "#ffffff"}
SERIES = ("#e64a19", "#ffb74d", "#5c6bc0", "#26a69a")
"""One colour per series (seed) where several are drawn side by side."""


@dataclass(frozen=True)
class Bar:
    """One policy's value: `kind` found, baseline or oracle (drawn as the bound: an outline)."""

    name: str
    value: float
    kind: str = "baseline"


def bars(title: str, metric: str, rows: Sequence[Bar]) -> str:
    """One horizontal bar per policy, longest first as given, the found one in colour and labelled."""
    return grouped(title, metric, [(row.name, row.kind, {"": row.value}) for row in rows])


def grouped(title: str, metric: str, rows: Sequence[tuple[str, str, Mapping[str, float]]]) -> str:
    """Per policy one bar per series (`{series: value}`), side by side; a legend where there are several."""
    series = list(dict.fromkeys(s for _, _, values in rows for s in values))
    top = max((v for _, _, values in rows for v in values.values()), default=0.0) or 1.0
    height = 40 + len(rows) * ROW * max(1, len(series)) + (20 if len(series) > 1 else 0)
    scale = (WIDTH - LABEL - 70) / top
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="14" font-weight="bold">{escape(title)}</text>',
        f'<text x="{WIDTH}" y="14" text-anchor="end" fill="#555">{escape(metric)}</text>',
    ]
    y = 28
    for name, kind, values in rows:
        band = ROW * max(1, len(series))
        label = f"{name} (bound)" if kind == "oracle" else name
        weight = ' font-weight="bold"' if kind == "found" else ""
        middle = y + band / 2 + 4
        anchor = f'x="{LABEL - 6}" y="{middle:.0f}" text-anchor="end"'
        parts.append(f"<text {anchor}{weight}>{escape(label)}</text>")
        for i, key in enumerate(series):
            if key not in values:
                continue
            value, top_y = values[key], y + i * ROW + (ROW - BAR) / 2
            fill = SERIES[i % len(SERIES)] if len(series) > 1 else COLOURS.get(kind, COLOURS["baseline"])
            outline = ' stroke="#555" stroke-dasharray="3,2"' if kind == "oracle" else ""
            fill = "#ffffff" if kind == "oracle" else fill
            length = max(value * scale, 1.0)
            box = f'x="{LABEL}" y="{top_y:.0f}" width="{length:.1f}" height="{BAR}"'
            parts.append(f'<rect {box} fill="{fill}"{outline}/>')
            parts.append(f'<text x="{LABEL + length + 4:.1f}" y="{top_y + BAR - 4:.0f}">{value:.4g}</text>')
        y += band
    if len(series) > 1:
        x = LABEL
        for i, key in enumerate(series):
            parts.append(
                f'<rect x="{x}" y="{y + 4}" width="10" height="10" fill="{SERIES[i % len(SERIES)]}"/>'
            )
            parts.append(f'<text x="{x + 14}" y="{y + 13}">{escape(key)}</text>')
            x += 20 + 7 * len(key)
    parts.append("</svg>")
    return "\n".join(parts)


LANES = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
)
"""One colour per lane (a fleet's instance) of a timeline."""
PANEL_W, PANEL_H = 300, 120


def lines(title: str, panels: Sequence[tuple[str, str, Sequence[Sequence[float]], float]]) -> str:
    """Small multiples of lanes over time: one panel per (policy, series), a line per lane, the panels of
    one series on one scale. Each panel is (policy, series, lanes, seconds between points)."""
    columns = list(dict.fromkeys(p for p, _, _, _ in panels))
    rows = list(dict.fromkeys(s for _, s, _, _ in panels))
    tops = {
        r: max((max(map(max, lanes), default=0.0) for _, s, lanes, _ in panels if s == r), default=0.0)
        for r in rows
    }
    width, height = 60 + len(columns) * (PANEL_W + 20), 40 + len(rows) * (PANEL_H + 36)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="14" font-weight="bold">{escape(title)}</text>',
    ]
    for policy, series, lanes, step_s in panels:
        x0 = 60 + columns.index(policy) * (PANEL_W + 20)
        y0 = 40 + rows.index(series) * (PANEL_H + 36)
        top = tops[series] or 1.0
        parts.append(f'<text x="{x0}" y="{y0 - 6}">{escape(policy)}: {escape(series)}</text>')
        parts.append(
            f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#ccc"/>'
        )
        parts.append(f'<text x="{x0 - 4}" y="{y0 + 10}" text-anchor="end" fill="#555">{top:.3g}</text>')
        parts.append(f'<text x="{x0 - 4}" y="{y0 + PANEL_H}" text-anchor="end" fill="#555">0</text>')
        span = max(len(lane) for lane in lanes) - 1 if lanes else 0
        parts.append(
            f'<text x="{x0 + PANEL_W}" y="{y0 + PANEL_H + 14}" text-anchor="end" fill="#555">'
            f"{span * step_s:.0f} s</text>"
        )
        for k, lane in enumerate(lanes):
            points = " ".join(
                f"{x0 + PANEL_W * i / max(span, 1):.1f},{y0 + PANEL_H * (1 - v / top):.1f}"
                for i, v in enumerate(lane)
            )
            colour = LANES[k % len(LANES)]
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
    parts.append("</svg>")
    return "\n".join(parts)
