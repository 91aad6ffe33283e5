"""``reminders demo``: bring the local stack up, schedule a realistic mix, run it to completion
on a simulated clock (a minute per tick), and say what happened to each reminder and why."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from reminders import db, endpoints, operator, pacing, runtime, schedules
from reminders.clock import FixedClock, SharedClock, iso, parse_instant
from reminders.local import pipeline, roles, stack
from reminders.secret_box import SecretBox

if TYPE_CHECKING:
    from reminders.local.twin.run import Twin

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
HORIZON = timedelta(hours=2)  # the simulated window; later occurrences stay scheduled
MAX_ROUNDS = 200
TICK = timedelta(minutes=1)  # the schedule rule's rate
# The paced burst: e-mail paced as a new SES account's sandbox would take it, a little faster.
EMAIL_RATE = 2.0
BURST_EMAILS = 12
PACED = "newsletter-3"
# The send window: a wake-up reminder due at 06:00 in Sao Paulo, its kind sending from 06:20.
MORNING_ZONE = "America/Sao_Paulo"
MORNING_WINDOW = "06:20-21:00"
HELD = "wake-up-7"


@dataclass
class Case:
    name: str
    expect: str
    schedule_key: str
    tenant: str = "acme"


def _stats(receiver_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{receiver_url}/_stats", timeout=5) as answer:
        data: dict[str, Any] = json.loads(answer.read())
        return data


def setup(conn: db.Connection, box: SecretBox, rcv: str, secret: str,
          now: datetime) -> list[Case]:
    def hook(name: str, query: str = "") -> str:
        url = f"{rcv}/hooks/{name}{query}"
        endpoints.register(conn, box, tenant=None, url=url, secret=secret, now=now)
        return url

    schedules.set_kind(conn, name="trip-tomorrow", now=now, stale_after=timedelta(hours=1),
                       max_attempts=5, redrive_budget=2)
    cases: list[Case] = []

    def add(name: str, expect: str, key: str, **kw: Any) -> None:
        kw.setdefault("channel", "webhook")
        kw.setdefault("recipients", ["alice"])
        schedules.schedule(conn, tenant="acme", key=key, now=now, **kw)
        cases.append(Case(name, expect, key))

    m = timedelta(minutes=1)
    add("on time", "sent", "invoice-1001", to=hook("billing"), at=now + 2 * m,
        payload={"text": "Balance due in 13 days"})
    add("overdue (scanner was down)", "sent", "invoice-0999", to=hook("billing"),
        at=now - 30 * m)
    add("cancelled before due", "suppressed", "booking-77", to=hook("bookings"),
        at=now + 5 * m)
    schedules.cancel(conn, tenant="acme", key="booking-77", now=now)
    add("recipient opted out", "suppressed", "digest-bob", to=hook("digest"),
        recipients=["bob"], at=now + 3 * m)
    schedules.opt_out(conn, tenant="acme", recipient="bob", channel="webhook", now=now)
    add("rescheduled to later, new revision", "sent", "trip-42", to=hook("trips"),
        at=now + 4 * m, kind="trip-tomorrow")
    schedules.reschedule(conn, tenant="acme", key="trip-42", at=now + 10 * m, revision="2",
                         now=now)
    add("endpoint answers 429, Retry-After 120s", "sent", "ship-1",
        to=hook("busy", "?codes=429,200&retry_after=120"), at=now + m)
    add("endpoint answers 500, then 200", "sent", "ship-2",
        to=hook("flaky", "?codes=500,200"), at=now + m)
    add("endpoint answers 410 Gone", "failed", "ship-3", to=hook("gone", "?codes=410"),
        at=now + m)
    add("missed its window (stale after 1h)", "stale", "trip-41", to=hook("trips"),
        at=now - 3 * timedelta(hours=1), kind="trip-tomorrow")
    add("fan-out to 3 subscribers, 1 opted out", "sent", "shipment-update-9",
        to=hook("shipments"), recipients=["carol", "dave", "erin"], at=now + 2 * m)
    schedules.opt_out(conn, tenant="acme", recipient="erin", channel="webhook", now=now)
    add("e-mail through SES", "sent", "email-1", channel="email",
        recipients=["frank@example.com"], at=now + m,
        payload={"subject": "Your balance", "text": "Due in 13 days"})
    add("SMS through SNS", "sent", "sms-1", channel="sms", recipients=["+14155550100"],
        at=now + m, payload={"text": "Your trip is tomorrow"})
    pacing.set_rate(conn, "email", EMAIL_RATE, EMAIL_RATE, now)
    add(f"e-mail burst of {BURST_EMAILS}, paced at {EMAIL_RATE:g}/s", "sent", PACED,
        channel="email", recipients=[f"reader{i}@example.com" for i in range(BURST_EMAILS)],
        at=now + 2 * m, payload={"subject": "March newsletter", "text": "What is new"})
    schedules.set_kind(conn, name="wake-up", now=now, send_windows=[MORNING_WINDOW])
    add(f"held to its recipient's morning ({MORNING_WINDOW} in {MORNING_ZONE})", "sent", HELD,
        to=hook("wake-up"), at=now, tz=MORNING_ZONE, kind="wake-up")
    from reminders.recurrence import Recurrence

    local_start = now.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None) + 15 * m
    add("daily 10:15 Europe/Berlin; next one waits", "sent", "meds-alice",
        to=hook("medication"), recurrence=Recurrence.parse(
            "FREQ=DAILY", "Europe/Berlin", local_start.isoformat(timespec="minutes")))
    return cases


def drive(run: Callable[[], Any], conn: db.Connection, clock: FixedClock, *,
          horizon: timedelta = HORIZON) -> int:
    """Ticks and their work (``run``: one of each) on the simulated clock, on to the next due
    instant each round, until nothing falls due within ``horizon``; returns the rounds run.
    The schedule rule fires every minute, so a wait of several minutes for the next due
    instant is ticked through a minute at a time (a quiet minute costs a scanner invocation
    that finds nothing, and no polling of empty queues): a scanner that skipped them would be
    a silent one, and its alarm would say so."""
    start, rounds = clock.now(), 0
    while rounds < MAX_ROUNDS:
        run()
        rounds += 1
        row = db.fetch_one(conn, "next_due") or {}
        following = row.get("at")
        if following is None or following > start + horizon:
            break
        now = clock.now()
        clock.set(min(max(following, now + timedelta(seconds=1)), now + TICK))
    return rounds


def main(*, json_output: bool = False) -> int:
    began = time.monotonic()
    if "REMINDERS_DEMO_LOGS" not in os.environ:  # the report says what happened; logs are noise
        from reminders.observability import logger

        logger.setLevel("CRITICAL")
    was_running = stack.load() is not None
    local = stack.up()
    try:
        return _run(local, began, json_output=json_output)
    finally:
        if not was_running:
            stack.down()


def _run(local: stack.LocalStack, began: float, *, json_output: bool) -> int:
    # The demo's own hands (its scenarios' set-up, the faults it injects, what it reads back to
    # report) are moto's administrator, as a test's are; the functions run as their roles.
    env = {**local.env(), **stack.credentials_env(stack.administrator(local.endpoint_url))}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    run_id = time.strftime("%Y%m%d%H%M%S")
    env["DATABASE_URL"] = local.new_database(f"demo_{run_id}")
    fixed = os.environ.get("REMINDERS_NOW")
    begin = parse_instant(fixed, "REMINDERS_NOW") if fixed else START
    twin, why = _twin(local, env["DATABASE_URL"], run_id, begin)
    clock: FixedClock
    if twin is not None:  # the template's functions, queues, mappings and rule
        assert isinstance(twin.clock, FixedClock)
        urls, clock = twin.require_urls(), twin.clock
    else:
        sys.stderr.write(f"reminders: demo: the handlers run in this process, as moto's "
                         f"administrator, not on the twin: {why}\n")
        urls = stack.prepare_aws(local.endpoint_url, prefix=f"demo-{run_id}")
        clock = FixedClock(begin)
    env.update({"REMINDERS_QUEUE_URL": urls.deliveries, "REMINDERS_DLQ_URL": urls.dlq,
                "REMINDERS_PARKING_QUEUE_URL": urls.parking})
    rt = runtime.from_env(env, clock=clock)
    conn = rt.connection()
    with db.transaction(conn):
        assert rt.secret_box is not None
        cases = setup(conn, rt.secret_box, local.receiver_url, local.receiver_secret,
                      clock.now())
    # A message nobody can read: the consumer fails it, SQS dead-letters it after
    # maxReceiveCount tries, and the redrive function parks it with the reason.
    rt.deliveries.send_raw("{not json", {})
    before = _stats(local.receiver_url)
    start = clock.now()
    # The template's alarms, from the run's first minute (the twin's metrics feed them).
    board = twin.alarm_board() if twin is not None else None
    if board is not None:
        board.advance(start)
    try:
        rounds = drive((lambda: twin.run(max_seconds=30)) if twin is not None
                       else (lambda: pipeline.run(rt, max_seconds=30)), conn, clock)
        if board is not None:
            board.advance(clock.now())
    finally:
        if twin is not None:
            twin.close()
    after = _stats(local.receiver_url)
    parked = rt.parking.receive(10)
    minutes = round((clock.now() - start).total_seconds() / 60)
    report = _report(conn, cases, before, after, parked, minutes, clock.now())
    report["wall_seconds"] = round(time.monotonic() - began, 1)
    report["database"] = f"demo_{run_id}"
    report["rounds"] = rounds
    report["functions"] = "twin" if twin is not None else "in-process"
    if board is not None:  # the template's alarms, evaluated on the run's metrics
        from reminders.local.twin.board import alarm_summary

        report["alarms"] = alarm_summary(board)
    report["started_at"] = iso(start)
    report["console"] = CONSOLE_COMMAND
    remember(database=f"demo_{run_id}", now=clock.now())
    rt.close()
    if json_output:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(_text(report))
    return 0 if report["all_as_expected"] else 1


# The one command that opens the console on the last demo's database, at its simulated time.
CONSOLE_COMMAND = "reminders console --demo"


def _last_demo_path() -> Any:
    return stack.home() / "last-demo.json"


def remember(*, database: str, now: datetime) -> None:
    """Keep the demo's database name and its simulated end, for `reminders console --demo`."""
    path = _last_demo_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"database": database, "now": iso(now)}))


def console_environment() -> dict[str, str]:
    """DATABASE_URL and REMINDERS_NOW of the last demo, on the local stack (started again when
    the demo stopped it: its Postgres keeps the demo's database); a clear error when no demo
    has run on this machine's REMINDERS_HOME."""
    from psycopg.conninfo import make_conninfo

    from reminders.errors import CommandFailed

    path = _last_demo_path()
    try:
        last = json.loads(path.read_text())
        database, now = str(last["database"]), str(last["now"])
    except (OSError, ValueError, KeyError, TypeError):
        raise CommandFailed(f"console --demo: no demo has run here ({path} is missing or "
                            "unreadable): run `make demo` (or `reminders demo`) first",
                            code=2) from None
    running = stack.load() or stack.up()
    return {**running.env(), "DATABASE_URL": make_conninfo(running.database_url,
                                                           dbname=database),
            "REMINDERS_NOW": now}


def _twin(local: stack.LocalStack, database_url: str, run_id: str,
          begin: datetime) -> tuple[Twin | None, str]:
    """The twin of the synthesized template on ``local``, started (its queues ``demo-<run>``,
    its clock at ``begin``); or None and why, where no template can be had (the CDK is not
    installed after `make demo`'s set-up)."""
    try:
        template = roles.synthesized_template(roles.SELF_PUBLISHING)
    except roles.TemplateError as exc:
        return None, str(exc)
    from reminders.local.twin.run import Twin

    root = stack.home() / "twin" / run_id
    root.mkdir(parents=True, exist_ok=True)
    twin = Twin(template, endpoint_url=local.endpoint_url, database_url=database_url,
                prefix=f"demo-{run_id}", clock=SharedClock(begin, str(root / "clock")),
                log_dir=root / "logs", secrets_key_arn=local.secrets_key_id,
                # The local stack's: a batch (its batching window, a cold start) never
                # outlasts it, so no message comes back while its batch still runs.
                visibility_timeout_override=stack.LOCAL_VISIBILITY_TIMEOUT)
    return twin.start(), ""


def _report(conn: db.Connection, cases: list[Case], before: dict[str, Any],
            after: dict[str, Any], parked: list[dict[str, Any]], minutes: int,
            now: datetime) -> dict[str, Any]:
    effects = {k: n - before["effects"].get(k, 0) for k, n in after["effects"].items()}
    rows = []
    for case in cases:
        shown = operator.show(conn, key=case.schedule_key, tenant=case.tenant)
        for d in shown["deliveries"]:
            if d["state"] == "suppressed" and d["reason"] == "rescheduled":
                outcome_ok = True  # the superseded generation; its replacement is listed too
            elif d["state"] == "scheduled" and d["occurrence_at"] > iso(now):
                outcome_ok = True  # a series' next occurrence, beyond the simulated window
                d["reason"] = f"next occurrence, due {d['occurrence_at']}"
            elif d["recipient"] == "erin":
                outcome_ok = d["state"] == "suppressed"
            else:
                outcome_ok = d["state"] == case.expect
            sent = [a["started_at"] for a in d["attempts"] if a["outcome"] == "sent"]
            rows.append({"case": case.name, "recipient": d["recipient"], "state": d["state"],
                         "reason": d["reason"], "attempts": d["attempts_made"],
                         "schedule_key": case.schedule_key, "held": d.get("held"),
                         "occurrence_at": d["occurrence_at"],
                         "sent_at": sent[-1] if sent else None,
                         "delivery_key": d["delivery_key"], "as_expected": outcome_ok,
                         "receiver_effects": effects.get(d["delivery_key"], 0)})
    totals = operator.status(conn, now=now)["by_state"]
    duplicates = {k: n for k, n in effects.items() if n > 1}
    paced, held = _paced_burst(rows), _held(rows)
    return {"simulated_minutes": minutes, "deliveries": rows,
            "paced_burst": paced, "held_by_window": held,
            "totals": {k: v for k, v in totals.items() if v},
            "receiver": {"effects": sum(effects.values()), "keys_with_duplicates": duplicates,
                         "bad_signatures": after["bad_signatures"] - before["bad_signatures"]},
            "parked_messages": [{"body": m["Body"], "reason": m.get("MessageAttributes", {})
                                 .get("reason", {}).get("StringValue")} for m in parked],
            "all_as_expected": all(r["as_expected"] for r in rows) and not duplicates
            and paced["as_expected"] and held["as_expected"]}


def _paced_burst(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The paced burst's sends: when the first and the last went, and the most in any one
    second (the bucket holds EMAIL_RATE: at most twice that in a second)."""
    sent = sorted(parse_instant(r["sent_at"], "sent_at") for r in rows
                  if r["schedule_key"] == PACED and r["sent_at"])
    most = max((sum(1 for t in sent if s <= t < s + timedelta(seconds=1)) for s in sent),
               default=0)
    return {"emails": BURST_EMAILS, "rate_per_second": EMAIL_RATE, "sent": len(sent),
            "first_sent_at": iso(sent[0]) if sent else None,
            "last_sent_at": iso(sent[-1]) if sent else None,
            "seconds": (sent[-1] - sent[0]).total_seconds() if sent else None,
            "most_in_one_second": most,
            "as_expected": len(sent) == BURST_EMAILS and most <= 2 * EMAIL_RATE}


def _held(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The reminder its send window held: due, sent, and sent at what local time."""
    (row,) = [r for r in rows if r["schedule_key"] == HELD]
    sent = parse_instant(row["sent_at"], "sent_at") if row["sent_at"] else None
    local = sent.astimezone(ZoneInfo(MORNING_ZONE)) if sent else None
    opens = MORNING_WINDOW.partition("-")[0]
    return {"zone": MORNING_ZONE, "window": MORNING_WINDOW, "due_at": row["occurrence_at"],
            "sent_at": row["sent_at"], "sent_local": local.strftime("%H:%M") if local else None,
            "held": row["held"],
            "as_expected": local is not None and local.strftime("%H:%M") >= opens
            and local.strftime("%H:%M") <= "21:00"}


def _text(report: dict[str, Any]) -> str:
    functions = ("the template's functions from their built assets, each in processes of its "
                 "own,\nits queues, event source mappings and schedule rule (the twin)."
                 if report["functions"] == "twin" else
                 "the real Lambda handlers, in this process (no template: not the twin).")
    lines = ["The whole pipeline on this machine: embedded Postgres, moto serving SQS, SES and SNS",
             f"over HTTP, a webhook receiver that checks signatures, and {functions}",
             f"Simulated clock from {report['started_at']}: {report['rounds']} scanner ticks "
             f"over {report['simulated_minutes']} minutes, in {report['wall_seconds']}s of "
             "wall time.", ""]
    for r in report["deliveries"]:
        mark = "ok " if r["as_expected"] else "!! "
        lines.append(f"{mark}{r['case']:<42} {r['recipient']:<18} {r['state']:<10} "
                     f"attempts={r['attempts']} effects={r['receiver_effects']}")
        if r["reason"]:
            lines.append(f"     why: {r['reason']}")
    lines.append("")
    paced = report["paced_burst"]
    lines.append(f"{'ok ' if paced['as_expected'] else '!! '}paced: {paced['sent']} of "
                 f"{paced['emails']} e-mails at {paced['rate_per_second']:g}/s, sent from "
                 f"{paced['first_sent_at']} to {paced['last_sent_at']} ({paced['seconds']} s), "
                 f"at most {paced['most_in_one_second']} in any second")
    held = report["held_by_window"]
    lines.append(f"{'ok ' if held['as_expected'] else '!! '}send window: due "
                 f"{held['due_at']}, sent {held['sent_at']}, {held['sent_local']} in "
                 f"{held['zone']} (its kind sends {held['window']} there)")
    lines.append("totals: " + ", ".join(f"{k} {v}" for k, v in report["totals"].items()))
    rcv = report["receiver"]
    lines.append(f"webhook receiver: {rcv['effects']} effects, "
                 f"{len(rcv['keys_with_duplicates'])} keys with duplicates, "
                 f"{rcv['bad_signatures']} bad signatures")
    for p in report["parked_messages"]:
        lines.append(f"parking queue: {p['body']!r} — {p['reason']}")
    lines.append("everything as expected" if report["all_as_expected"]
                 else "SOMETHING UNEXPECTED: see the lines marked !!")
    if "alarms" in report:  # reminders.local.twin.board.alarm_summary of the run's board
        lines.append("alarms:")
        lines += [f"  {line}" for line in report["alarms"]]
    lines.append(f"look at it in the console: {report['console']}")
    return "\n".join(lines)
