"""Metadata plots are real PNGs embedded in Markdown, and they change with the data."""

import base64
import re

from assets.plots import bar_chart, line_chart

DATA_URI = re.compile(r"^!\[(?P<title>[^\]]*)\]\(data:image/png;base64,(?P<data>[A-Za-z0-9+/=]+)\)$")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_of(value) -> tuple[str, bytes]:
    """The title and the decoded image of a plot's Markdown (one image, nothing else)."""
    match = DATA_URI.match(value.value)
    assert match, value.value[:80]
    return match["title"], base64.b64decode(match["data"], validate=True)


def test_a_bar_chart_is_a_png_with_its_title():
    title, png = png_of(bar_chart({"clarity": {"1": 0, "5": 3}}, title="scores per criterion", xlabel="score"))
    assert title == "scores per criterion"
    assert png.startswith(PNG_SIGNATURE)
    assert len(png) < 100_000  # stored in the event log with the rest of the metadata


def test_different_data_give_different_images():
    # Same labels, one count changed; and a second series: each must show.
    one = png_of(bar_chart({"clarity": {"1": 0, "5": 3}}, title="t", xlabel="score"))[1]
    changed = png_of(bar_chart({"clarity": {"1": 2, "5": 3}}, title="t", xlabel="score"))[1]
    two_series = png_of(bar_chart({"clarity": {"1": 0, "5": 3}, "on_topic": {"1": 1}}, title="t", xlabel="score"))[1]
    assert len({one, changed, two_series}) == 3
    # The same data draw the same image: metadata does not churn between identical runs.
    assert png_of(bar_chart({"clarity": {"1": 0, "5": 3}}, title="t", xlabel="score"))[1] == one


def test_a_line_chart_with_gaps_is_a_png():
    value = line_chart([0, 1, 2], {"reward": [0.1, None, 0.3]}, title="reward", xlabel="step", ylabel="mean")
    title, png = png_of(value)
    assert title == "reward" and png.startswith(PNG_SIGNATURE)
    other = png_of(line_chart([0, 1, 2], {"reward": [0.1, 0.2, 0.3]}, title="reward", xlabel="step", ylabel="mean"))
    assert other[1] != png
