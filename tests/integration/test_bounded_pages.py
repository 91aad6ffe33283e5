"""The console's Attention page reads what its page needs, however many parked rows the tenant
or the state it is filtered by holds: measured as the buffers and the index entries its
statement touches (EXPLAIN (ANALYZE, BUFFERS)), not as times, at a small case and at a large one
that differs only in rows the page does not show (later parked rows of the same tenant and
state)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders import db, operator
from tests.bench.support import URL, statement_reads, untimed
from tests.conftest import T0, Harness
from tests.integration.test_bounded_tick import within

PAGE = 20
TENANTS = 10
PER_SCHEDULE = 100  # a row in 100 of each parked state (unknown, dead, failed, stale)
SMALL, LARGE = 300, 3_000  # schedules: 30,000 and 300,000 deliveries

# The console benchmark's shape (tests/bench/console.py), smaller: one-off schedules of 100
# recipients over the tenants and 3 kinds, due over the last 31 days, 4 % of rows parked and
# the rest sent; schedules ``first`` to ``last``.
FILL = """
insert into tenants (id) select 't' || g from generate_series(1, %(tenants)s::int) g
    on conflict do nothing;
insert into kinds (name) select unnest(array['trip', 'digest']) on conflict do nothing;
insert into schedules (tenant, schedule_key, kind, channel, destination, at, request_hash,
                       created_at, updated_at)
select 't' || (g %% %(tenants)s::int + 1), 'fill-' || g,
       (array['default', 'trip', 'digest'])[g %% 3 + 1], 'webhook', %(url)s,
       %(now)s - (g %% 744) * interval '1 hour' - (g %% 60) * interval '1 minute', 'fill',
       %(now)s - interval '32 days', %(now)s - interval '32 days'
from generate_series(%(first)s::int, %(last)s::int) g;
insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                        delivery_key, occurrence_at, revision, due_at, state, reason,
                        attempts_made, created_at, updated_at)
select s.tenant, s.id, 0, 'r' || r, 'webhook', %(url)s, 'fill:' || s.id || ':' || r, s.at,
       '1', s.at, st.state, case when st.state <> 'sent' then 'filled' end, 1,
       s.at - interval '1 day', s.at + interval '5 minutes'
from schedules s cross join generate_series(1, %(per)s::int) r
cross join lateral (select case r %% 100 when 0 then 'dead' when 1 then 'unknown'
                                         when 2 then 'failed' when 3 then 'stale'
                                         else 'sent' end as state) st
where s.schedule_key like 'fill-%%'
  and substr(s.schedule_key, 6)::int between %(first)s::int and %(last)s::int"""

FILTERS: list[dict[str, str]] = [
    {"tenant": "t7", "state": "dead"},
    {"tenant": "t7"},
    {"state": "failed"},
    {},
    {"kind": "trip"},
    {"tenant": "t7", "kind": "trip"},
    {"state": "dead", "kind": "digest"},
    {"recipient": "r1"},
    {"channel": "webhook"},
    {"tenant": "t7", "channel": "webhook"},
]
# No row matches: the page is empty, and reading it costs a probe of an index, not a walk.
EMPTY: list[dict[str, str]] = [
    {"recipient": "nobody"},
    {"tenant": "t7", "recipient": "nobody"},
    {"kind": "nokind"},
    {"tenant": "t7", "kind": "nokind"},
    {"channel": "sms"},
    {"state": "dead", "channel": "email"},
]
# Due ranges no delivery falls in: the fill's are due on the minute over the 31 days before
# the clock, so 40 seconds between two minutes amid them, and a day long after them.
GAP = (T0 - timedelta(days=5, seconds=-10), T0 - timedelta(days=5, seconds=-50))
EMPTY_RANGE = (datetime(2100, 1, 1, tzinfo=UTC), datetime(2100, 1, 2, tzinfo=UTC))
# The Deliveries page (every state), by due time and by last change.
BROWSE: list[dict[str, Any]] = [
    {"recipient": "nobody"},
    {"tenant": "t7", "recipient": "nobody"},
    {"recipient": "nobody", "sort": "updated"},
    {"kind": "nokind"},
    {"tenant": "t7", "kind": "nokind", "sort": "updated"},
    {"channel": "sms"},
    {"state": "dead", "channel": "email", "sort": "updated"},
    {"due_from": EMPTY_RANGE[0], "due_to": EMPTY_RANGE[1], "sort": "updated"},
    {"tenant": "t7", "due_from": EMPTY_RANGE[0], "due_to": EMPTY_RANGE[1],
     "sort": "updated"},
    {"due_from": GAP[0], "due_to": GAP[1], "sort": "updated"},
    {"tenant": "t7", "due_from": GAP[0], "due_to": GAP[1], "sort": "updated"},
]


def _fill(h: Harness, first: int, last: int) -> None:
    with untimed(h.conn):
        for statement in FILL.split(";\n"):
            h.conn.execute(statement, {"tenants": TENANTS, "url": URL, "now": h.clock.now(),
                                       "first": first, "last": last, "per": PER_SCHEDULE})
    h.conn.execute("vacuum analyze")


def _one_statement(h: Harness, monkeypatch: pytest.MonkeyPatch, page: Callable[..., Any],
                   filters: dict[str, str]) -> tuple[Any, dict[str, int]]:
    """A page's rows and "more", and what the one statement behind it reads (run again under
    EXPLAIN)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    every = db.fetch_all

    def fetch_all(conn: db.Connection, name: str, params: Any = None, **kw: Any) -> Any:
        seen.append((name, params or {}))
        return every(conn, name, params, **kw)

    with monkeypatch.context() as m:
        m.setattr(db, "fetch_all", fetch_all)
        got = page(h.conn, limit=PAGE, **filters)
    assert len(seen) == 1, seen
    name, params = seen[0]
    return got, statement_reads(h.conn, name, params)


def _page_reads(h: Harness, monkeypatch: pytest.MonkeyPatch,
                filters: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """The first Attention page's keys, and what its one statement reads."""
    (rows, more), reads = _one_statement(h, monkeypatch, operator.attention, filters)
    keys = [r["delivery_key"] for r in rows]
    expected = _expected(h, filters)
    assert (keys, more) == (expected[:PAGE], len(expected) > PAGE), filters
    assert bool(keys) == (filters not in EMPTY), filters
    return keys, reads


def _expected(h: Harness, filters: dict[str, str]) -> list[str]:
    """The first page and one row more, as a plain ordered read of every parked row says
    they are (the kind as the schedule names it)."""
    rows = h.conn.execute("""
        select delivery_key from deliveries
        where state in ('unknown', 'dead', 'failed', 'stale')
          and (%(tenant)s::text is null or tenant = %(tenant)s)
          and (%(state)s::text is null or state = %(state)s)
          and (%(kind)s::text is null
               or (select s.kind from schedules s where s.id = schedule_id) = %(kind)s)
          and (%(recipient)s::text is null or recipient = %(recipient)s)
          and (%(channel)s::text is null or channel = %(channel)s)
        order by due_at, id limit %(limit)s""",
                          {"tenant": filters.get("tenant"), "state": filters.get("state"),
                           "channel": filters.get("channel"),
                           "kind": filters.get("kind"), "recipient": filters.get("recipient"),
                           "limit": PAGE + 1}).fetchall()
    return [r["delivery_key"] for r in rows]


def test_the_attention_page_of_a_tenant_or_a_state_reads_a_page_not_every_row_of_it(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Filtered by tenant and state, the page read every one of the tenant's rows in that state
    and sorted them (deliveries_tenant_state: 767 buffers at 1,000,000 rows for a page of 51,
    6 at 10,000); an index in the page's order was not chosen while the query said
    `state in (...) and state = %(state)s`."""
    h = harness
    _fill(h, 1, SMALL)
    small = {str(f): _page_reads(h, monkeypatch, f) for f in FILTERS + EMPTY}
    _fill(h, SMALL + 1, LARGE)
    large = {str(f): _page_reads(h, monkeypatch, f) for f in FILTERS + EMPTY}
    for f in FILTERS + EMPTY:
        (_, before), (_, after) = small[str(f)], large[str(f)]
        assert within(before["buffers"], after["buffers"]), (f, before, after)
        # the page's rows (one lookup of each, and of its schedule), the parked ranges'
        # first entries and a row more a range to know there is more
        assert after["rows_read"] <= 2 * (PAGE + 1) + 10, (f, after)


def _browse_reads(h: Harness, monkeypatch: pytest.MonkeyPatch,
                  filters: dict[str, Any]) -> dict[str, int]:
    """What the Deliveries page's one statement reads for a filter no row matches."""
    (rows, more), reads = _one_statement(h, monkeypatch, operator.deliveries, filters)
    assert (rows, more) == ([], False), filters
    return reads


def test_the_deliveries_page_of_a_recipient_nobody_has_is_a_probe_not_a_walk(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the Deliveries page a recipient nobody has walked the whole table in due order (121
    buffers at 30,000 rows, 1,665 at 300,000); now one probe of deliveries_browse_recipient_due,
    by due time or by last change. A kind or a channel nobody has walked it too (811 and 8,121
    buffers for a kind): now the kept counts. Due ranges nothing falls in, sorted by last
    change, are read off the due index (a range), not by walking the last-change index. (The
    Attention page's kind and recipient filters, matching or not, are cases of the test
    above: the kind was the schedule's, filtered after the join, 93 index entries for a page
    of 20 of one kind at 300,000 rows.)"""
    h = harness
    _fill(h, 1, SMALL)
    small = {str(f): _browse_reads(h, monkeypatch, f) for f in BROWSE}
    _fill(h, SMALL + 1, LARGE)
    # A kind or a channel is checked against the kept counts first: their groups (tenants,
    # kinds, channels and states: the same at both sizes), not the deliveries.
    row = h.conn.execute("select count(*) as n from delivery_counts").fetchone()
    groups = int((row or {})["n"])
    for f in BROWSE:
        after = _browse_reads(h, monkeypatch, f)
        assert within(small[str(f)]["buffers"], after["buffers"]), (f, small[str(f)], after)
        assert after["rows_read"] <= 10 + groups * ("kind" in f or "channel" in f), (f, after)


# A kind and a channel only a handful of deliveries have: five rows of the kind `rare`, sent by
# SMS, scattered over the fill's due times, made with the small case only.
FEW = """
insert into kinds (name) values ('rare') on conflict do nothing;
insert into schedules (tenant, schedule_key, kind, channel, destination, at, request_hash,
                       created_at, updated_at)
select 't' || g, 'few-' || g, 'rare', 'sms', '+15550100' || g, %(now)s - g * interval '5 days',
       'few', %(now)s - interval '32 days', %(now)s - interval '32 days'
from generate_series(1, 5) g;
insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                        delivery_key, occurrence_at, revision, due_at, state, reason,
                        attempts_made, created_at, updated_at)
select s.tenant, s.id, 0, 'few', 'sms', s.destination, 'few:' || s.id, s.at, '1', s.at, 'sent',
       null, 1, s.at - interval '1 day', s.at + interval '5 minutes'
from schedules s where s.schedule_key like 'few-%%'"""
FEW_FILTERS: list[dict[str, Any]] = [
    {"kind": "rare"},
    {"channel": "sms"},
    {"kind": "rare", "sort": "updated"},
    {"channel": "sms", "sort": "updated"},
    {"tenant": "t3", "kind": "rare"},
]


def _few_reads(h: Harness, monkeypatch: pytest.MonkeyPatch,
               filters: dict[str, Any]) -> dict[str, int]:
    """What the Deliveries page's one statement reads for a filter only the few rows match; the
    page holds exactly those (tenant t3's one, or all five)."""
    (rows, more), reads = _one_statement(h, monkeypatch, operator.deliveries, filters)
    keys = [r["delivery_key"] for r in rows]
    assert not more and all(k.startswith("few:") for k in keys), (filters, keys)
    assert len(keys) == (1 if "tenant" in filters else 5), (filters, keys)
    return reads


def test_the_deliveries_page_of_a_kind_or_a_channel_few_rows_have_reads_those_rows(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind or a channel a handful of deliveries have walked the due index (or the last-change
    one) filtered until the page filled, which it never did: every delivery was read to find
    five. Now each reads its own range of an index by kind or by channel, however many rows
    of other kinds and channels the table holds."""
    h = harness
    _fill(h, 1, SMALL)
    with untimed(h.conn):
        for statement in FEW.split(";\n"):
            h.conn.execute(statement, {"now": h.clock.now()})
    h.conn.execute("analyze")
    small = {str(f): _few_reads(h, monkeypatch, f) for f in FEW_FILTERS}
    _fill(h, SMALL + 1, LARGE)
    row = h.conn.execute("select count(*) as n from delivery_counts").fetchone()
    groups = int((row or {})["n"])  # the kept counts' guard reads each group once
    for f in FEW_FILTERS:
        after = _few_reads(h, monkeypatch, f)
        assert within(small[str(f)]["buffers"], after["buffers"]), (f, small[str(f)], after)
        # the five rows and their schedules, the index entries that find them, and the guard
        assert after["rows_read"] <= 30 + groups, (f, after)
