"""The live overview's pieces that need no database: the throughput window's whole minutes,
the chart's bars (one a minute, stacked, each with its figures), a recorded detail in words."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import pairwise

import pytest

from reminders import throughput
from reminders.console import timefmt
from reminders.console.live import throughput_svg
from reminders.errors import InvalidInput

NOW = datetime(2027, 3, 1, 9, 30, 42, 123456, tzinfo=UTC)


def test_the_window_is_whole_minutes_ending_with_the_current_one() -> None:
    since, starts = throughput.window(NOW, 60)
    assert since == datetime(2027, 3, 1, 8, 31, tzinfo=UTC)
    assert len(starts) == 60 and starts[-1] == datetime(2027, 3, 1, 9, 30, tzinfo=UTC)
    assert all((b - a).total_seconds() == 60 for a, b in pairwise(starts))
    assert throughput.window(NOW, 1) == (starts[-1], [starts[-1]])
    for bad in (0, throughput.MAX_MINUTES + 1):
        with pytest.raises(InvalidInput, match="minutes: from 1 to 1440"):
            throughput.window(NOW, bad)


def test_a_chart_has_a_stacked_bar_a_minute_carrying_its_figures() -> None:
    _, starts = throughput.window(NOW, 3)
    entries = [{"minute": s.isoformat().replace("+00:00", "Z"), "sent": n, "failed": f,
                "unknown": u} for s, n, f, u in zip(starts, (4, 0, 1), (1, 0, 0), (0, 0, 2),
                                                   strict=True)]
    svg = str(throughput_svg(entries, "web<hook>"))
    assert "<script" not in svg and 'data-channel="web&lt;hook&gt;"' in svg
    bars = re.findall(r'data-minute="([^"]+)" data-series="(\w+)" data-n="(\d+)"', svg)
    assert len(bars) == 9
    assert [(m, s, int(n)) for m, s, n in bars if int(n)] == [
        ("2027-03-01T09:28:00Z", "sent", 4), ("2027-03-01T09:28:00Z", "failed", 1),
        ("2027-03-01T09:30:00Z", "sent", 1), ("2027-03-01T09:30:00Z", "unknown", 2)]
    # the busiest minute (5) is the axis's top: its bars fill the plot's height
    heights = [float(h) for h in re.findall(r'height="([\d.]+)" fill', svg)]
    assert heights[0] + heights[1] == pytest.approx(150 - 18 - 8, abs=0.2)


def test_a_recorded_detail_is_said_in_words() -> None:
    assert timefmt.detail(None) == timefmt.detail({}) == timefmt.detail([]) == "no detail"
    assert timefmt.detail({"count": 3, "dry_run": False, "keys": ["a", "b"], "x": None}) == (
        "count: 3; dry_run: no; keys: a, b; x: none")
    assert timefmt.absolute(NOW) == "2027-03-01T09:30:42Z"


def test_shared_figures_share_a_failed_read_and_hold_at_most_keep_filters() -> None:
    from reminders.console.live import SharedFigures
    from reminders.errors import DatabaseUnavailable

    ticks = [0.0]
    reads: list[str | None] = []
    down = [True]

    def read(tenant: str | None) -> dict[str, object]:
        reads.append(tenant)
        if down[0]:
            raise DatabaseUnavailable("the database is unreachable")
        return {"tenant": tenant, "read": len(reads)}

    shared = SharedFigures(read, seconds=10, clock=lambda: ticks[0], keep=2)
    for _ in range(3):  # three pages in the period: one read, its failure shown to each
        with pytest.raises(DatabaseUnavailable, match="unreachable"):
            shared.get(None)
    assert reads == [None]
    down[0] = False
    ticks[0] = 10.0
    assert shared.get(None) == {"tenant": None, "read": 2}
    assert shared.get(None) == {"tenant": None, "read": 2}
    ticks[0] = 11.0
    assert shared.get("acme")["read"] == 3
    ticks[0] = 12.0
    assert shared.get("globex")["read"] == 4  # a third filter: the oldest read (None) goes
    assert shared.get("acme")["read"] == 3 and shared.get("globex")["read"] == 4
    assert shared.get(None)["read"] == 5
    with pytest.raises(ValueError, match="keep: at least 1"):
        SharedFigures(read, seconds=10, clock=lambda: 0.0, keep=0)
