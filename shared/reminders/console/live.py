"""The overview's figures, which its live region re-reads in place (``/live``, every few
seconds, fetched by ``static/live.js``: no reload, no build step, nothing from elsewhere; one
read a refresh period shared by every open page, :class:`SharedFigures`), and
the throughput charts: per channel, each minute's sends, failures and unknowns as stacked bars
in server-rendered SVG, every bar carrying its figures (``data-*``) and a tooltip."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from markupsafe import Markup, escape

from reminders import db, operator, throughput
from reminders.console.charts import lateness_svg

COLOURS = {"sent": "#3b8a4f", "failed": "#b3261e", "unknown": "#d08c00"}
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 620, 150, 34, 18, 8


def figures(ctx: Any, conn: db.Connection, *, tenant: str | None) -> dict[str, Any]:
    """What the overview shows, read at one instant: `status` (with the queues and the
    alarms), lateness over the hour and the day, throughput over the hour, recent actions."""
    now: datetime = ctx.now()
    status = operator.status(conn, now=now, tenant=tenant)
    status.update(ctx.queues())
    if ctx.alarms is not None:
        status["alarms"] = ctx.alarms()
    hour = operator.lateness(conn, now=now, window_seconds=3600, tenant=tenant)
    day = operator.lateness(conn, now=now, window_seconds=86400, tenant=tenant)
    flow = throughput.throughput(conn, now=now, minutes=throughput.DEFAULT_MINUTES,
                                 tenant=tenant)
    charts = [(channel, flow["by_channel"][channel], throughput_svg(entries, channel))
              for channel, entries in flow["per_minute"].items()
              if any(flow["by_channel"][channel].values())]
    quiet = [c for c in flow["per_minute"] if not any(flow["by_channel"][c].values())]
    return {"title": "Overview", "status": status, "tenant": tenant, "now": now,
            "lateness": [("last hour", hour, lateness_svg(hour, "last hour")),
                         ("last day", day, lateness_svg(day, "last day"))],
            "throughput": flow, "throughput_charts": charts, "quiet_channels": quiet,
            "series": throughput.SERIES, "outcomes": throughput.OUTCOMES,
            "actions": operator.recent_actions(conn, limit=15),
            "split": split(status["by_tenant_kind_channel"]),
            "live_query": {"tenant": tenant} if tenant else {}}


class SharedFigures:
    """The overview's figures, read at most once a refresh period for each tenant filter (all
    tenants' being one) and shared by every open overview: each page fetches its live region
    every ``seconds``, and without this each fetch re-ran ``status``, both lateness windows, the
    throughput and the queues' counts, so N open pages cost N such reads a period. A page that
    asks while a read is under way waits for that read; one that asks within ``seconds`` of it
    gets its figures (they say the instant they were read at). A read that failed is shared
    the same way, so a database that is down is asked once a period, not once a page. At most
    ``keep`` filters are held (the oldest read is let go first)."""

    def __init__(self, read: Callable[[str | None], dict[str, Any]], *, seconds: float,
                 clock: Callable[[], float], keep: int = 64) -> None:
        if keep < 1:
            raise ValueError(f"keep: at least 1, got {keep}")
        self._read = read
        self._seconds = seconds
        self._clock = clock
        self._keep = keep
        self._guard = threading.Lock()
        self._entries: dict[str | None, _Entry] = {}

    def get(self, tenant: str | None) -> dict[str, Any]:
        """The figures for ``tenant`` (None: every tenant's), read now only if those held are
        older than the period; raises what the shared read raised."""
        entry = self._entry(tenant)
        with entry.lock:
            if entry.read_at is None or self._clock() - entry.read_at >= self._seconds:
                try:
                    entry.value, entry.error = self._read(tenant), None
                except Exception as exc:  # noqa: BLE001 - shared with every page, raised below
                    entry.value, entry.error = None, exc
                entry.read_at = self._clock()
            if entry.error is not None:
                raise entry.error
            assert entry.value is not None
            return entry.value

    def put(self, tenant: str | None, value: dict[str, Any]) -> None:
        """Figures read elsewhere (the whole overview, which always reads afresh), held as
        this period's."""
        entry = self._entry(tenant)
        with entry.lock:
            entry.value, entry.error, entry.read_at = value, None, self._clock()

    def _entry(self, tenant: str | None) -> _Entry:
        with self._guard:
            entry = self._entries.get(tenant)
            if entry is None:
                while len(self._entries) >= self._keep:
                    oldest = min(self._entries, key=lambda k: self._entries[k].read_at or 0.0)
                    del self._entries[oldest]
                entry = self._entries[tenant] = _Entry()
            return entry


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    read_at: float | None = None
    value: dict[str, Any] | None = None
    error: Exception | None = None


def split(rows: list[dict[str, Any]], cap: int = 200) -> dict[str, Any]:
    """status's tenant x kind x channel x state counts as rows of (tenant, kind, channel) with a
    count per state, the first ``cap`` rows (the JSON of `status` has them all)."""
    table: dict[tuple[str, str, str], dict[str, int]] = {}
    for r in rows:
        table.setdefault((r["tenant"], r["kind"], r["channel"]), {})[r["state"]] = r["n"]
    items = sorted(table.items())
    return {"rows": [(*k, v) for k, v in items[:cap]], "more": max(0, len(items) - cap)}


def throughput_svg(entries: list[dict[str, Any]], channel: str) -> Markup:
    """One channel's minutes as stacked bars (sent, failed, unknown from the bottom), a bar a
    minute, oldest on the left; the y axis's top is the busiest minute."""
    series = throughput.SERIES
    top = max([sum(e[s] for s in series) for e in entries] + [1])
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    step = plot_w / max(len(entries), 1)
    bar = max(step - 1.0, 1.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="throughput" width="{WIDTH}" '
             f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'data-channel="{escape(channel)}" aria-label="{escape(channel)}: attempts per '
             f'minute">',
             f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - 4}" y2="{TOP + plot_h}" '
             'stroke="#999" stroke-width="1"/>',
             f'<text x="{LEFT - 4}" y="{TOP + 9}" text-anchor="end" font-size="10" '
             f'fill="#555">{top}</text>',
             f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="10" '
             'fill="#555">0</text>']
    for i, e in enumerate(entries):
        x = LEFT + i * step
        y = float(TOP + plot_h)
        minute = escape(e["minute"])
        for s in series:
            n = int(e[s])
            height = plot_h * n / top
            y -= height
            parts.append(f'<rect class="bar {s}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                         f'height="{height:.1f}" fill="{COLOURS[s]}" data-minute="{minute}" '
                         f'data-series="{s}" data-n="{n}"><title>{minute[11:16]} UTC: {n} {s}'
                         '</title></rect>')
    last = len(entries) - 1
    for i in sorted({0, len(entries) // 2, last}):
        if 0 <= i <= last:  # the first label from its bar on, the last one up to its bar
            anchor = "start" if i == 0 else "end" if i == last else "middle"
            x = LEFT + i * step + (0 if i == 0 else bar if i == last else bar / 2)
            parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 4}" text-anchor="{anchor}" '
                         f'font-size="10" fill="#555">{escape(entries[i]["minute"][11:16])}'
                         '</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
