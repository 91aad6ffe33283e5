"""db.each_alone: named statements, each in a transaction of its own, sent together (one round
trip through the pooler, where each would cost one, three with a timeout), with what each
would do alone when one fails: the ones before it stay committed, it raises, the ones after it
never run. The scanner's once-a-tick steps go through it."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from reminders import db, scanner
from reminders.errors import Conflict
from tests.conftest import Harness
from tests.integration.pipeline_helpers import schedule_webhook, tick
from tests.round_trips import count_round_trips

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def _proof(n: int) -> db.Step:
    return db.Step("identity_proof_claim", {
        "digest": hashlib.sha256(str(n).encode()).hexdigest(), "caller_arn": "arn:test",
        "command": "status", "now": NOW, "expires_at": NOW + timedelta(minutes=5)})


def _proofs(conn: db.Connection) -> int:
    row = conn.execute("select count(*) as n from identity_proofs").fetchone()
    return int((row or {})["n"])


def test_the_steps_cost_one_round_trip_and_return_what_each_returns_alone(
        conn: db.Connection) -> None:
    steps = [_proof(1), db.Step("live_leases"),
             db.Step("tenants_with_due_work", {"now": NOW}),
             db.Step("oldest_overdue", {"now": NOW, "cap": 10}, timeout=5.0),
             _proof(1)]  # accepted once: the second claim of the same proof returns no row
    got: list[list[db.Row]] = []
    trips = count_round_trips(conn, lambda: got.extend(db.each_alone(conn, steps)))
    assert trips == 1
    assert len(got[0]) == 1 and got[4] == []  # the first claim committed before the second
    assert got[1] == db.fetch_all(conn, "live_leases")
    assert got[2] == db.fetch_all(conn, "tenants_with_due_work", {"now": NOW})
    assert got[3] == db.fetch_all(conn, "oldest_overdue", {"now": NOW, "cap": 10})
    assert conn.info.transaction_status.name == "IDLE"


def test_a_step_that_fails_is_raised_the_ones_before_it_kept_and_the_ones_after_not_run(
        conn: db.Connection, database_url: str) -> None:
    """The second step waits on the turn's row, which another session holds, past its own
    statement timeout: its error is raised as it would be alone; the first step's claim is
    committed, the third's never made; the connection is idle again."""
    with db.connect(database_url) as holder:
        holder.execute("begin")
        holder.execute("select 1 from scanner_turn where id = 1 for update")
        take = db.Step("scanner_turn_take", {"holder": "00000000-0000-0000-0000-000000000001",
                                             "until": NOW, "now": NOW}, timeout=0.2)
        with pytest.raises(Conflict, match="statement timed out") as raised:
            db.each_alone(conn, [_proof(1), take, _proof(2)])
        assert not raised.value.retryable
        holder.execute("rollback")
    assert conn.info.transaction_status.name == "IDLE"
    assert _proofs(conn) == 1
    assert db.fetch_all(conn, "identity_proof_claim", _proof(1).params) == []  # kept
    assert len(db.fetch_all(conn, "identity_proof_claim", _proof(2).params)) == 1  # not made


def test_inside_a_transaction_the_steps_run_one_at_a_time_within_it(
        conn: db.Connection) -> None:
    with pytest.raises(RuntimeError), db.transaction(conn):
        got = db.each_alone(conn, [_proof(1), db.Step("live_leases")])
        assert len(got[0]) == 1 and got[1][0]["n"] == 0
        raise RuntimeError("roll back")
    assert _proofs(conn) == 0  # the caller's transaction decided


def test_a_tick_costs_a_round_trip_a_pass_and_five_more(harness: Harness) -> None:
    """The turn; the steps before the drain together; one lease a pass, and the look for work
    falling due once nothing is left; retention; then the counts, the lateness and the turn's
    end together: five round trips beside the passes, busy or idle."""
    h = harness
    schedule_webhook(h, "few", recipients=[f"r{i}" for i in range(5)])
    conn = h.rt.connection()
    busy: list[scanner.TickSummary] = []
    trips = count_round_trips(conn, lambda: busy.append(scanner.tick(h.rt, refill=False)))
    assert busy[0].leased == 5 and busy[0].passes == 1
    assert trips == 5 + 1
    tick(h)
    idle: list[scanner.TickSummary] = []
    trips = count_round_trips(conn, lambda: idle.append(scanner.tick(h.rt, refill=False)))
    assert idle[0].leased == 0 and idle[0].passes == 0
    assert trips == 5


def test_a_step_postgres_aborts_for_a_conflict_runs_again_alone_and_so_do_the_rest(
        conn: db.Connection) -> None:
    """The second step's insert fires a trigger that aborts its transaction once with a
    serialization failure (SQLSTATE 40001, as Postgres aborts a transaction for a conflict):
    the first step stays committed and is not run again; the second runs again alone and
    commits; the ones after it run alone; every step's rows come back in order."""
    second = _proof(2).params
    assert isinstance(second, dict)
    conn.execute("create sequence conflict_once")  # a sequence: not rolled back with the abort
    conn.execute(f"""
        create function conflict_once() returns trigger language plpgsql as $$
        begin
            if new.digest = '{second['digest']}' then
                if nextval('conflict_once') = 1 then
                    raise exception 'conflict, once' using errcode = '40001';
                end if;
            end if;
            return new;
        end $$""")
    conn.execute("create trigger conflict_once before insert on identity_proofs "
                 "for each row execute function conflict_once()")
    got = db.each_alone(conn, [_proof(1), _proof(2), _proof(3), db.Step("live_leases")])
    assert [len(rows) for rows in got[:3]] == [1, 1, 1]
    assert got[3] == [{"n": 0}]
    assert conn.info.transaction_status.name == "IDLE"
    assert _proofs(conn) == 3  # each once: the first was not claimed again
    fired = conn.execute("select last_value from conflict_once").fetchone()
    assert fired is not None and fired["last_value"] == 2  # aborted once, then committed alone
