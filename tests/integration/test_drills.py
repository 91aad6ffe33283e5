"""The fault drills, each in its short form, on the session's Postgres and moto (the restart
drill on a Postgres of its own): the fault lands, every delivery of the batch gets an outcome,
and the invariants checked from outside find nothing. Then the checker itself, on rows made to
break each invariant, and ``reminders drill`` as an operator runs it."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

import pytest

from reminders import cli, db, invariants, schedules
from reminders.clock import FixedClock
from reminders.local import drills, stack
from reminders.local.twin.watch import watch_template
from tests.conftest import PgCluster

TERMINAL = {"sent", "failed", "suppressed", "stale", "unknown", "dead"}

@pytest.fixture(scope="module")
def lab(pg_cluster: PgCluster, moto_endpoint: str) -> Iterator[drills.Lab]:
    with drills.Lab(postgres_url=pg_cluster.direct, endpoint_url=moto_endpoint,
                    bouncer=pg_cluster.pooler) as lab:
        yield lab


@pytest.mark.parametrize("name", list(drills.DRILLS))
def test_drill_recovers_with_no_violation(lab: drills.Lab, name: str) -> None:
    result = drills.run_drill(name, lab, short=True)
    report = drills.text(result, limit=50)
    assert result.faults >= 1, report  # the fault landed: the drill tested something
    assert result.violations == [], report
    assert result.recovered, report
    assert result.recovery_simulated_seconds is not None
    assert set(result.states) <= TERMINAL, report
    assert sum(result.states.values()) >= drills.SHORT.webhooks + drills.SHORT.emails
    # The report names the alarms that fired, and when: the ones the fault provokes.
    assert result.alarms is not None, result.alarms_note
    fired = {a["alarm"] for a in result.alarms}
    assert EXPECTED_ALARMS[name] <= fired, report
    assert fired <= EXPECTED_ALARMS[name] | ALSO_FIRED.get(name, set()), report
    assert "alarms fired:" in report
    for a in result.alarms:
        assert f"{a['alarm']} at " in report
    # The service ran on the twin: its functions in processes of their own, not the test's.
    assert result.functions == "twin", result.functions_note
    pids = {pid for found in result.function_pids.values() for pid in found}
    assert result.function_pids["scanner"] and result.function_pids["migrate"], result
    assert os.getpid() not in pids
    if name == "consumer-kill":  # the killed process, then a cold start in a new one
        assert len(result.function_pids["consumer"]) >= 2, result.function_pids
        assert any(str(pid) in report for pid in result.function_pids["consumer"]), report


def test_a_value_changed_in_a_copy_of_the_template_fails_the_drill_naming_it(
        lab: drills.Lab) -> None:
    template, why = watch_template()
    assert template is not None, why
    changed = copy.deepcopy(template)
    (scanner,) = [k for k in changed["Resources"] if k.startswith("FunctionsScanner")
                  and changed["Resources"][k]["Type"] == "AWS::Lambda::Function"]
    variables = changed["Resources"][scanner]["Properties"]["Environment"]["Variables"]
    misspelt = "REMINDERS_SCAN_BATCH".replace("BATCH", "BACH")  # not a name in the tree
    variables[misspelt] = variables.pop("REMINDERS_SCAN_BATCH")
    (result,) = drills.run_drills(["consumer-outage"], short=True, lab=lab, template=changed)
    (violation,) = result.violations
    assert violation.startswith(f"the drill could not run: TwinError: {scanner} Environment: "
                                "ConfigError"), violation
    assert misspelt in violation


def test_the_in_process_fallback_runs_each_function_as_its_role(
        lab: drills.Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """No CPython 3.13 found (its lookup pointed at nothing): the drill's functions run in
    process, and where a process must die, ``reminders tick`` and ``reminders work`` run in
    processes of their own. There too each function is its role, not moto's administrator:
    moto's decisions show the scanner's SendMessage, the consumer's ReceiveMessage and
    DeleteMessage and the redrive function's polls signed with session keys of the drill's
    roles, assumed by each command (the administrator's key made the roles)."""
    import infra.layer

    monkeypatch.setattr(infra.layer, "bytecode_python", lambda: None)
    endpoint = lab.endpoint_url
    admin = stack.administrator(endpoint).access_key
    site = drills.Site(lab, "fallback-roles")
    try:
        assert site.twin is None
        assert "no CPython 3.13" in (site.functions_note or ""), site.functions_note
        url = site.hook("ok")
        (key,) = site._schedule("fallback", ["someone"], "webhook", drills.START,
                                site.clock.now(), to=url)
        seen = stack.decision_count(endpoint)
        tick = site.background("tick")
        assert tick.wait(120) == 0, (site.work_dir / "tick-0.log").read_text()
        work = site.background("work", max_seconds=30)
        assert work.wait(120) == 0, (site.work_dir / "work-1.log").read_text()
        decisions = stack.decisions(endpoint, since=seen)
        sent = site.deliveries()[key]["state"]
        queue = site.queues.deliveries.rsplit("/", 1)[1]
        prefix = queue.removesuffix("-deliveries")
    finally:
        site.close()
    assert sent == "sent"
    by_action: dict[str, set[str]] = {}
    for d in decisions:
        if d["resource"].rsplit(":", 1)[-1] in {queue, f"{prefix}-dlq", f"{prefix}-parking"}:
            assert d["outcome"] == "allowed", d
            by_action.setdefault(d["action"].removeprefix("sqs:"), set()).add(d["key"])
    # The scanner sent the one message; the consumer received and deleted it; the redrive
    # function polled the dead-letter queue: each with a session key (ASIA...) of its own.
    # The administrator's key only sampled the queues (the local alarms' figures).
    (scanner,) = by_action["SendMessage"]
    (consumer,) = by_action["DeleteMessage"]
    handled = {k for a in ("SendMessage", "SendMessageBatch", "ReceiveMessage",
                           "DeleteMessage", "DeleteMessageBatch") for k in by_action.get(a, ())}
    assert admin not in handled, by_action
    assert scanner != consumer and len(handled) == 3, by_action
    assert all(k.startswith("ASIA") for k in handled), by_action
    assumed = {d["resource"].rsplit("/", 1)[1].rsplit("-", 1)[0] for d in decisions
               if d["action"] == "sts:AssumeRole" and d["key"] == admin}
    assert {f"{prefix}-{f}" for f in ("scanner", "consumer", "redrive")} <= assumed, assumed


# What each drill's fault must fire, and what else it may (a fault's side effects). On the twin
# a function process killed mid-invocation, or one that raises, is an invocation error, as
# Lambda counts it.
EXPECTED_ALARMS: dict[str, set[str]] = {
    "consumer-kill": {"ConsumerErrors"},
    "scanner-kill": {"ScannerErrors"},
    "terminate-backends": set(),
    "postgres-restart": {"ScannerErrors"},
    "racing-scanners": set(),
    "consumer-outage": {"DeliveriesQueueAge", "OldestOverdueDelivery"},
    "duplicate-message": {"DeadLetterArrivals"},
    "garbage": {"DeadLetterArrivals", "ParkingQueueNotEmpty"},
}
# A kill mid-send of an e-mail leaves it unknown, and the sends it cut short wait out their
# attempts' deadlines (they are late); a scanner killed before it published, and lease
# messages lost, leave their deliveries to wait out their leases (300 s), and they are late.
CUT_SHORT = {"DeliveriesUnknown", "OldestOverdueDelivery"}
# A consumer invocation that reaches the stopped Postgres raises (ConsumerErrors) and fails
# its batch, and a message whose batches failed maxReceiveCount times reaches the dead-letter
# queue (DeadLetterArrivals), where the redrive function's invocation that reaches the stopped
# Postgres raises too (RedriveErrors); or it waits the outage out.
ALSO_FIRED: dict[str, set[str]] = {"consumer-kill": CUT_SHORT,
                                   "postgres-restart": CUT_SHORT | {"ConsumerErrors",
                                                                    "DeadLetterArrivals",
                                                                    "RedriveErrors"},
                                   "scanner-kill": {"OldestOverdueDelivery"},
                                   "duplicate-message": {"OldestOverdueDelivery"}}


def test_the_command_line_knows_every_drill() -> None:
    assert tuple(drills.DRILLS) == cli.DRILLS


def test_reminders_drill_runs_on_servers_of_its_own_and_leaves_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REMINDERS_", "AWS_")) and k != "DATABASE_URL"}
    env["REMINDERS_HOME"] = str(tmp_path / "home")  # never a running local stack
    proc = subprocess.Popen([sys.executable, "-m", "reminders.cli", "drill", "racing-scanners",
                             "--short", "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    report = json.loads(out)
    assert report["violations"] == 0
    (result,) = report["drills"]
    assert result["name"] == "racing-scanners"
    assert result["recovered"] is True
    assert result["states"] == {"sent": drills.SHORT.webhooks + drills.SHORT.emails}
    assert any("four scanners" in line for line in result["did"])
    # Its Postgres, moto and files are gone.
    prefix = f"reminders-drill-{proc.pid}-"
    assert not [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(prefix)]
    assert not [cmd for cmd in _command_lines() if prefix in cmd]
    assert not (tmp_path / "home").exists()


def _command_lines() -> list[str]:
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError):  # it may end while we look
            found.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return found


# ---------------------------------------------------------------- the checker itself


def test_each_broken_invariant_is_one_line_naming_its_delivery(conn: db.Connection) -> None:
    clock = FixedClock(drills.START)
    now = clock.now()
    url = "http://127.0.0.1:9/hooks/x"
    conn.execute("insert into endpoints (url, secret) values (%s, %s)", (url, "whsec_" + "A" * 32))
    schedules.set_kind(conn, name="tight", now=now, max_attempts=1)
    keys = {}
    for name in ("expired", "open", "budget", "twice", "due", "resent"):
        result = schedules.schedule(conn, tenant="acme", recipients=[name], channel="webhook",
                                    to=url, at=now, now=now, key=name,
                                    kind="tight" if name == "budget" else "default")
        keys[name] = result.deliveries[0].delivery_key
    ids = {r["delivery_key"]: r["id"] for r in conn.execute(
        "select id, delivery_key from deliveries").fetchall()}

    def state(name: str, sql: str, *args: object) -> None:
        conn.execute(f"update deliveries set {sql} where id = %s", (*args, ids[keys[name]]))

    def attempt(name: str, no: int, outcome: str | None) -> None:
        conn.execute(
            "insert into attempts (tenant, delivery_id, attempt_no, lease_token, started_at,"
            " finished_at, outcome) values ('acme', %s, %s, gen_random_uuid(), %s, %s, %s)",
            (ids[keys[name]], no, now, now if outcome else None, outcome))

    state("expired", "state = 'leased', lease_token = gen_random_uuid(), lease_expires_at = %s",
          now - timedelta(minutes=2))
    state("open", "state = 'sent'")
    attempt("open", 1, None)
    state("budget", "state = 'retrying', due_at = %s", now + timedelta(hours=1))
    attempt("budget", 1, "transient")
    attempt("budget", 2, "transient")
    state("twice", "state = 'sent'")
    attempt("twice", 1, "sent")
    state("resent", "state = 'sent'")
    attempt("resent", 1, "unknown")
    attempt("resent", 2, "sent")
    stats = {"requests": {keys["twice"]: 2, keys["resent"]: 2, "schedule:999/0:x:y:webhook": 1},
             "ok_answers": {keys["twice"]: 2, keys["resent"]: 2}, "effects": {}}

    found = invariants.violations(conn, now=now, receiver_stats=stats)

    expected = [("lease outlived its expiry", "expired"),
                ("open attempt without a live lease", "open"),
                ("attempts over budget", "budget"),
                ("send without its attempt", "twice"),
                ("more than one effect", "twice")]
    assert len(found) == len(expected) + 1, found
    for rule, name in expected:
        assert any(line.startswith(f"{rule}: {keys[name]}: ") for line in found), (rule, found)
    assert any(line.startswith("effect without a delivery: schedule:999/") for line in found)
    assert all("\n" not in line for line in found)
    assert not any(keys["resent"] in line for line in found)  # a same-key resend, recorded

    unsettled = invariants.unsettled(conn, now + timedelta(minutes=1))
    assert sorted(line.split(": ")[1] for line in unsettled) == sorted(
        [keys["expired"], keys["due"]])
    # Within a tick of its expiry a lease is still the scanner's to reclaim, not a violation.
    earlier = invariants.violations(conn, now=now - timedelta(seconds=90))
    assert not any(line.startswith("lease outlived") for line in earlier), earlier
