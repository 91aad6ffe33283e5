"""The lateness histogram as server-rendered SVG (pygal; no script, nothing fetched)."""

from __future__ import annotations

import re
from typing import Any


def lateness_svg(data: dict[str, Any], title: str) -> str:
    import pygal
    from pygal.style import Style

    style = Style(background="transparent", plot_background="transparent",
                  foreground="#333", foreground_strong="#111", foreground_subtle="#999",
                  colors=("#3b6ea8",), font_family="sans-serif", label_font_size=11,
                  major_label_font_size=11, title_font_size=13, value_font_size=10)
    chart = pygal.Bar(width=560, height=240, style=style, show_legend=False, js=[],
                      disable_xml_declaration=True, title=title, x_label_rotation=0,
                      print_values=True, print_zeroes=False, show_y_guides=True,
                      explicit_size=True, margin=8)
    chart.x_labels = [b["name"] for b in data["buckets"]]
    chart.add("sends", [b["n"] for b in data["buckets"]])
    svg: Any = chart.render(is_unicode=True)
    # pygal writes its configuration as an inline <script> even with js=[]: the page runs
    # none (its policy allows only the console's own script file), so none is sent.
    return re.sub(r"<script\b.*?</script>", "", str(svg), flags=re.DOTALL)
