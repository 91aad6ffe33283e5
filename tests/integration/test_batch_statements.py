"""The batch writes the consumer and the scanner make do work linear in the batch: each row is
found by primary key once, and the batch is never joined to the rows row by row (n by n
comparisons). Each statement runs for real under EXPLAIN ANALYZE on a batch of 200, and its
effect is checked afterwards, so a plan that did nothing cannot pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from reminders.db.queries import query
from tests.conftest import Harness
from tests.integration.pipeline_helpers import schedule_webhook

BATCH = 200
FILLER = 20_000


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def run_explained(h: Harness, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the named statement under EXPLAIN ANALYZE (it executes and commits); its plan's
    nodes."""
    row = h.conn.execute("explain (analyze, format json) " + query(name), params).fetchone()
    assert row is not None
    document = next(iter(row.values()))
    document = json.loads(document) if isinstance(document, str) else document
    return list(nodes(document[0]["Plan"]))


def comparisons_discarded(plan: list[dict[str, Any]]) -> int:
    return sum(int(node.get("Rows Removed by Join Filter", 0)) for node in plan)


def a_large_table(h: Harness) -> None:
    """20,000 finished deliveries, and statistics taken before the batch was leased (as before
    a burst): on a table of a few hundred rows any plan is cheap, and the planner picks none
    of the ones that matter."""
    schedule_webhook(h, "filler", recipients=[f"f{i}" for i in range(FILLER)])
    h.conn.execute("update deliveries set state = 'sent', reason = 'filler' "
                   "where schedule_id = (select id from schedules where schedule_key = 'filler')")
    h.conn.execute("analyze")


def leased(h: Harness, key: str) -> tuple[list[int], list[str]]:
    schedule_webhook(h, key, recipients=[f"r{i}" for i in range(BATCH)])
    rows = h.conn.execute("""
        update deliveries set state = 'leased', lease_token = gen_random_uuid(),
                              lease_expires_at = %(until)s, leases = leases + 1
        where schedule_id = (select id from schedules where schedule_key = %(key)s)
        returning id, lease_token::text as token""",
                          {"until": h.clock.now() + timedelta(minutes=10), "key": key}).fetchall()
    assert len(rows) == BATCH
    return [r["id"] for r in rows], [r["token"] for r in rows]


def pending(h: Harness, key: str) -> tuple[list[int], list[str]]:
    """The key's deliveries leased by the scanner's own statement: pending leases."""
    schedule_webhook(h, key, recipients=[f"r{i}" for i in range(BATCH)])
    rows = h.conn.execute(query("lease_due"), {
        "now": h.clock.now(), "batch": BATCH, "share": BATCH, "lease_seconds": 600}).fetchall()
    assert len(rows) == BATCH
    return [r["id"] for r in rows], [str(r["lease_token"]) for r in rows]


def probes(plan: list[dict[str, Any]]) -> int:
    """Rows found through the deliveries' primary key, over all loops: a probe a loop, or
    one scan of the key for a list of ids (`id = any(...)`)."""
    return sum(int(node["Actual Loops"]) * max(int(node["Actual Rows"]), 1) for node in plan
               if node.get("Index Name") == "deliveries_pkey")


def states(h: Harness, ids: list[int]) -> dict[str, int]:
    rows = h.conn.execute("select state, count(*) as n from deliveries where id = any(%s) "
                          "group by state", (ids,)).fetchall()
    return {r["state"]: r["n"] for r in rows}


def test_a_consumer_batchs_statements_look_each_row_up_once(harness: Harness) -> None:
    h = harness
    a_large_table(h)
    ids, tokens = pending(h, "linear")
    now = h.clock.now()
    plans = {"deliveries_take_leases": run_explained(
        h, "deliveries_take_leases", {"ids": ids, "tokens": tokens, "now": now})}
    assert states(h, ids) == {"leased": BATCH}
    assert h.conn.execute("select count(*) as n from due_queue").fetchone() == {"n": 0}
    plans["attempts_start"] = run_explained(h, "attempts_start", {
        "ids": ids, "tokens": tokens, "deadlines": [now + timedelta(seconds=30)] * BATCH,
        "now": now})
    attempt_ids = [r["id"] for r in h.conn.execute(
        "select id from attempts where delivery_id = any(%s)", (ids,)).fetchall()]
    assert len(attempt_ids) == BATCH
    plans["attempts_finish"] = run_explained(h, "attempts_finish", {
        "attempt_ids": attempt_ids, "outcomes": ["sent"] * BATCH,
        "status_codes": [200] * BATCH, "details": ["ok"] * BATCH,
        "retry_afters": [None] * BATCH, "now": now})
    plans["deliveries_settle"] = run_explained(h, "deliveries_settle", {
        "ids": ids, "tokens": tokens, "states": ["sent"] * BATCH, "reasons": ["ok"] * BATCH,
        "due_ats": [None] * BATCH, "attempt_nos": [1] * BATCH, "now": now})

    assert states(h, ids) == {"sent": BATCH}
    assert h.conn.execute("select count(*) as n from attempts where delivery_id = any(%s) "
                          "and outcome = 'sent' and finished_at is not null",
                          (ids,)).fetchone() == {"n": BATCH}
    assert {name: comparisons_discarded(plan) for name, plan in plans.items()} == dict.fromkeys(
        plans, 0)
    # One probe a row; taking the leases locks the rows (skipping those another transaction
    # holds) and then updates them, a probe each.
    assert {name: probes(plans[name]) for name in (
        "deliveries_take_leases", "attempts_start", "deliveries_settle")} == {
        "deliveries_take_leases": 2 * BATCH, "attempts_start": BATCH,
        "deliveries_settle": BATCH}


def test_the_scanners_lease_and_release_never_touch_a_delivery_row(harness: Harness) -> None:
    """Migration 0013: a lease writes its token on the due entries, and a release clears it;
    neither looks a delivery up nor writes one."""
    h = harness
    a_large_table(h)
    schedule_webhook(h, "narrow", recipients=[f"r{i}" for i in range(BATCH)])
    before = h.conn.execute("select id, xmin::text as v from deliveries").fetchall()
    params = {"now": h.clock.now(), "batch": BATCH, "share": BATCH, "lease_seconds": 600}
    lease = run_explained(h, "lease_due", params)
    rows = h.conn.execute("select id, token::text as token from due_queue "
                          "where token is not null").fetchall()
    assert len(rows) == BATCH
    release = run_explained(h, "pending_release", {
        "ids": [r["id"] for r in rows], "tokens": [r["token"] for r in rows]})
    assert h.conn.execute("select count(*) as n from due_queue where token is null"
                          ).fetchone() == {"n": BATCH}
    assert (probes(lease), probes(release)) == (0, 0)
    assert comparisons_discarded(lease) == comparisons_discarded(release) == 0
    after = h.conn.execute("select id, xmin::text as v from deliveries").fetchall()
    assert after == before  # not one row version written


def test_releasing_a_batch_looks_each_row_up_once(harness: Harness) -> None:
    h = harness
    a_large_table(h)
    ids, tokens = leased(h, "release")
    plan = run_explained(h, "lease_release", {
        "ids": ids, "tokens": tokens, "reason": "queue refused", "now": h.clock.now()})
    assert states(h, ids) == {"scheduled": BATCH}
    assert comparisons_discarded(plan) == 0
    # Locks the rows (skipping those another transaction holds), then updates them: a probe
    # each, as marking received does.
    assert probes(plan) == 2 * BATCH


def test_the_recheck_finds_a_webhook_s_endpoint_by_index_however_many_there_are(
        harness: Harness) -> None:
    """The re-check reads a webhook's endpoint with two probes of its (tenant, url) index, not
    a scan of every tenant's endpoints (50,000 rows read for 10 webhooks, before)."""
    h = harness
    (key,) = schedule_webhook(h, "indexed")
    h.conn.execute("insert into tenants (id) select 'other' || n from generate_series(1, 50) n"
                   " on conflict do nothing")
    h.conn.execute("insert into endpoints (tenant, url, secret)"
                   " select 'other' || (n % 50 + 1), 'https://h' || n || '.example/hook',"
                   " 'whsec_x' from generate_series(1, 5000) n")
    h.conn.execute("analyze endpoints")
    row = h.conn.execute("select id from deliveries where delivery_key = %s", (key,)).fetchone()
    assert row is not None
    plan = h.conn.execute("explain (format json) " + query("recheck_load"),
                          {"ids": [row["id"]]}).fetchone()
    assert plan is not None
    text = json.dumps(plan)
    assert "endpoints_tenant_url" in text
    assert not _scans(plan, "endpoints"), text


def _scans(plan: Any, table: str) -> bool:
    """Whether the plan reads ``table`` whole."""
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") == table:
            return True
        return any(_scans(v, table) for v in plan.values())
    if isinstance(plan, list):
        return any(_scans(v, table) for v in plan)
    return False
