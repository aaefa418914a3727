"""The HTML report's charts: static SVG drawn by pygal, with no script and nothing fetched.

pygal builds the SVG with ElementTree, so titles and series names (property
names: user-derived text) are escaped like any XML text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

Points = Sequence[tuple[float, float]]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
LEGEND_COLUMNS = 2  # a legend of more than two series, in columns under the plot
_LEGEND_ROW_PX = 20
INSTALL_HINT = "the HTML report needs pygal: pip install pygal (or reinstall fuzzdist, which depends on it)"


def missing_plotting() -> str | None:
    """Why charts can't be drawn here (one line saying what to install); None when they can."""
    import importlib.util

    return INSTALL_HINT if importlib.util.find_spec("pygal") is None else None


def xy_chart(
    title: str,
    series: Sequence[tuple[str, Points]],
    *,
    x_title: str,
    y_title: str,
    secondary: Sequence[tuple[str, Points]] = (),
    secondary_title: str = "",
    height: int = 320,
    counts: bool = False,
    empty: str = "nothing to plot yet",
) -> str:
    """An SVG line chart of ``(x, y)`` series (``secondary`` ones on a right-hand axis), as markup to inline;
    ``counts``: the y values are whole numbers, labelled as such.

    With no point to draw it is a sentence instead (``empty`` says why), not an empty frame: pygal can't
    scale an axis without points.  The legend, under the plot in :data:`LEGEND_COLUMNS` columns, adds to
    ``height`` rather than squeezing the plot (a squeezed plot broke its axis title letter by letter).
    """
    import pygal
    from pygal.style import Style

    series = [(name, points) for name, points in series if len(points)]
    # pygal can't scale a secondary axis with no point on it (early in a campaign, before the first
    # failure or event): a series without points is left out there.
    secondary = [(name, points) for name, points in secondary if len(points)]
    if not series and not secondary:
        return f'<p class="note empty-chart">{html.escape(title)}: {html.escape(empty)}.</p>'
    entries = len(series) + len(secondary)
    columns = 1 if entries <= 2 else LEGEND_COLUMNS
    height += _LEGEND_ROW_PX * max(0, -(-entries // columns) - 2)  # room for the legend's rows past two

    style = Style(
        background="white",
        plot_background="white",
        foreground="#333",
        foreground_strong="#111",
        foreground_subtle="#ddd",
        colors=PALETTE,
        font_family="sans-serif",
        title_font_size=15,
        label_font_size=11,
        major_label_font_size=11,
        legend_font_size=12,
        tooltip_font_size=11,
    )
    chart = pygal.XY(
        js=[],
        disable_xml_declaration=True,
        style=style,
        title=title,
        x_title=x_title,
        y_title=y_title,
        width=860,
        height=height,
        show_dots=False,
        stroke_style={"width": 2},
        legend_at_bottom=True,
        legend_at_bottom_columns=columns,
        truncate_legend=80 if columns == 1 else 55,
        truncate_label=12,
        dynamic_print_values=False,
        x_value_formatter=_fmt_number,
        value_formatter=_fmt_number,
        show_x_guides=False,
        print_values=False,
        include_x_axis=True,
        no_data_text="no data yet",
    )
    if counts:
        top = max((int(y) for _, points in series for _, y in points), default=0)
        step = max(1, -(-top // 8))  # at most 9 labels
        chart.config.y_labels = list(range(0, max(top, 1) + step, step))
    for name, points in series:
        chart.add(name, [(float(x), float(y)) for x, y in points])
    for name, points in secondary:
        chart.add(
            f"{name} ({secondary_title})" if secondary_title else name,
            [(float(x), float(y)) for x, y in points],
            secondary=True,
        )
    # pygal always adds a <script> holding its config (for its tooltips, which are off): the page has no script.
    return _SCRIPT.sub("", chart.render(is_unicode=True))


_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.S)


def _fmt_number(value: float) -> str:
    if value is None:
        return ""
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
