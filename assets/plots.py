"""Small plots for asset metadata: PNGs embedded in Markdown (`data:` URIs), which the Dagster UI renders inline.

matplotlib runs on its non-interactive Agg backend (no display on a worker). Figures are kept small (a few
tens of KB) because they are stored in the event log with the rest of the metadata.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

FIGSIZE = (5.0, 3.0)
DPI = 80


def _markdown(figure: plt.Figure, title: str) -> dg.MetadataValue:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=DPI)
    plt.close(figure)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{data})")


def bar_chart(
    series: Mapping[str, Mapping[str, float]], *, title: str, xlabel: str, ylabel: str = "count"
) -> dg.MetadataValue:
    """Grouped bars: one group per x value, one bar per series (e.g. score 1-5 per criterion).

    Args:
        series: series name -> {x label: value}; x labels keep the order of first appearance.
        title, xlabel, ylabel: the figure's labels.
    """
    labels: list[str] = []
    for values in series.values():
        labels += [x for x in values if x not in labels]
    figure, axes = plt.subplots(figsize=FIGSIZE)
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        axes.bar([j + i * width for j in range(len(labels))], [values.get(x, 0) for x in labels], width, label=name)
    axes.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(labels))], labels)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if len(series) > 1:
        axes.legend(fontsize="small")
    return _markdown(figure, title)


def line_chart(
    x: Sequence[float], series: Mapping[str, Sequence[float | None]], *, title: str, xlabel: str, ylabel: str
) -> dg.MetadataValue:
    """Lines over a shared x axis (e.g. reward per training step); None values leave gaps."""
    figure, axes = plt.subplots(figsize=FIGSIZE)
    for name, values in series.items():
        axes.plot(x, [float("nan") if v is None else v for v in values], marker=".", label=name)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if len(series) > 1:
        axes.legend(fontsize="small")
    return _markdown(figure, title)


def interval_chart(
    x: Sequence[int],
    series: Mapping[str, Sequence[tuple[float, float, float] | None]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
) -> dg.MetadataValue:
    """Points with error bars over a shared x axis (e.g. a failure rate and its interval per night, one series per
    model); each value is `(estimate, low, high)`, or None where the series has no point."""
    figure, axes = plt.subplots(figsize=FIGSIZE)
    for i, (name, values) in enumerate(series.items()):
        shift = (i - (len(series) - 1) / 2) * 0.08  # series side by side, so overlapping intervals stay readable
        points = [(at + shift, *value) for at, value in zip(x, values, strict=True) if value is not None]
        xs, mids, lows, highs = zip(*points, strict=True) if points else ((), (), (), ())
        errors = [
            [m - lo for m, lo in zip(mids, lows, strict=True)],
            [h - m for m, h in zip(mids, highs, strict=True)],
        ]
        axes.errorbar(xs, mids, yerr=errors, marker="o", capsize=3, label=name)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.set_xticks(list(x))
    if len(series) > 1:
        axes.legend(fontsize="small")
    return _markdown(figure, title)
