"""The local stack and the pipeline on it: ``migrate``, ``local up|down``, ``tick``, ``work``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from reminders.cli.common import (
    _conn,
    _json_flag,
    _Parser,
    _quiet_flag,
    _runtime,
    _seconds,
    _settings,
    emit,
    environment,
    progress,
)
from reminders.outcome import EXIT_NOT_DONE, EXIT_PARTIAL_FAILURE


def cmd_migrate(args: argparse.Namespace) -> int:
    from reminders.db import migrate

    with _conn() as conn:
        applied = migrate.apply(conn, _settings().db_schema)
    emit(args, {"applied": applied}, f"applied migrations: {applied or 'none (up to date)'}")
    return 0


def cmd_local_up(args: argparse.Namespace) -> int:
    from reminders.local import stack

    if args.explain:
        return _explain(args)
    with progress(args, "local up") as shown:
        running, restarted = stack.start(
            on_step=lambda step, n, total: shown.show(step, done=n, total=total, force=True))
    if args.env:  # for a shell's eval: the receiver's URL and secret as variables
        from shlex import quote

        print("\n".join([*(f"# {line}" for line in restarted.values()),
                         *(f"export {k}={quote(v)}" for k, v in running.shell_env().items())]))
        return 0
    emit(args, {**running.as_json(), "restarted": list(restarted)}, "\n".join(
        [*restarted.values(), "local stack running:"]) + "\n" + "\n".join(
        f"  {k}={v}" for k, v in running.env().items() if not k.startswith("AWS_") or
        k == "AWS_ENDPOINT_URL") + f"\n  webhook receiver secret: {running.receiver_secret}"
        f"\n  webhook receiver: {running.receiver_url}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    """How each resource type of the synthesized template runs on this machine."""
    from reminders.local.roles import TemplateError, synthesized_template
    from reminders.local.twin import explain

    try:
        template = synthesized_template({})
    except TemplateError as exc:
        print(f"reminders: cannot explain: {exc}", file=sys.stderr)
        return 2
    lines = explain.explain(template)
    emit(args, {"resources": explain.as_json(lines)}, explain.as_text(lines))
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from reminders.local import stack

    found = stack.stop()  # None: no stack was recorded; else what had already ended
    emit(args, {"stopped": found is not None, "not_running": list(found or {})},
         "nothing was running" if found is None else
         "\n".join([*found.values(), "local stack stopped"]))
    return 0


SERVE_STOP_SIGNALS = ("SIGINT", "SIGTERM")


def cmd_local_serve(args: argparse.Namespace) -> int:
    """The local stack's rule and event source mappings on the wall clock until a signal."""
    import signal
    import threading

    from reminders.clock import SystemClock
    from reminders.errors import CommandFailed
    from reminders.local import stack
    from reminders.local.twin import on_stack
    from reminders.local.twin.serve import serve
    from reminders.outcome import EXIT_UNAVAILABLE

    local = stack.load()
    if local is None:
        raise CommandFailed("local serve: no local stack is running (or part of it has "
                            "stopped): start it with `reminders local up`",
                            code=EXIT_UNAVAILABLE)
    clock = SystemClock()
    twin, why = on_stack.start_twin(local, clock)
    if twin is None:
        raise CommandFailed(f"local serve: the template's functions cannot run on the twin: "
                            f"{why}", code=EXIT_UNAVAILABLE)
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(number: int, _frame: Any) -> None:
        stopped_by.append(signal.Signals(number).name)
        stop.set()

    previous = {name: signal.signal(getattr(signal, name), on_signal)
                for name in SERVE_STOP_SIGNALS}
    try:
        with _twin_alarms(twin):
            if not args.json:
                print(f"serving the local stack (the rule each minute, the mappings polled) "
                      f"until Ctrl-C, at most {args.max_minutes} minutes", flush=True)
            served = serve(twin, clock=clock, stop=stop, max_minutes=args.max_minutes,
                           say=(lambda line: None) if args.json else
                           (lambda line: print(line, flush=True)))
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
        on_stack.close(twin)
    why_ended = f"on {stopped_by[0]}" if stopped_by else f"after {args.max_minutes} minutes"
    emit(args, {**served.as_json(), "stopped": stopped_by[0] if stopped_by else None},
         f"stopped {why_ended}: {served.ticks} rule firings, {served.published} published, "
         f"{served.records} records delivered to the functions ({served.failures} failed)")
    return 0


def _local_alarms(rt: Any) -> Any:
    """On a moto server on this machine (the local stack's, or a test's), the template's
    alarms watch the command: its handlers' metrics and invocations, and the queues sampled
    once it ends, evaluated and kept in REMINDERS_HOME for ``reminders status`` and the
    console. Against AWS, or without a template, nothing (CloudWatch has the real ones)."""
    from contextlib import nullcontext
    from urllib.parse import urlsplit

    from reminders import config
    from reminders.local import stack
    from reminders.local.twin import watch

    endpoint = environment().get("AWS_ENDPOINT_URL") or ""
    if urlsplit(endpoint).hostname not in ("127.0.0.1", "localhost", "::1"):
        return nullcontext(None)
    template, _ = watch.watch_template()
    if template is None:
        return nullcontext(None)
    urls = config.require_queues(rt.settings)
    # CloudWatch reads SQS's metrics itself, with no grant of the operator's: here the queues
    # are sampled as moto's administrator, the stand-in's own access.
    sqs = stack.aws_client("sqs", endpoint) if stack.enforces_access(endpoint) \
        else rt.deliveries.client
    try:
        watching = watch.AlarmWatch.for_local_queues(
            template, rt.clock, endpoint_url=endpoint, sqs=sqs,
            deliveries_url=urls.deliveries, simulated=False)
    except ValueError:  # queues named otherwise than the template's: not the local stack's
        return nullcontext(None)
    rt.metrics = watching.metrics
    return watch.persisted(watching, watch.alarms_path(stack.home()))


def _on_twin(rt: Any, command: str) -> Any:
    """On the stack `reminders local up` runs, the local stack's twin started for this command
    (reminders.local.twin.on_stack); None elsewhere, or where the twin cannot be had, which
    is then said on stderr: the handlers run in this process, never silently."""
    from reminders.local.twin import on_stack

    local = on_stack.recorded_stack(environment())
    if local is None:
        return None
    twin, why = on_stack.start_twin(local, rt.clock)
    if twin is None:
        sys.stderr.write(f"reminders: {command}: the handlers run in this process, not on the "
                         f"twin: {why}\n")
    return twin


def _twin_alarms(twin: Any) -> Any:
    from reminders.local import stack
    from reminders.local.twin import on_stack, watch

    return watch.persisted(on_stack.alarm_watch(twin), watch.alarms_path(stack.home()))


def cmd_tick(args: argparse.Namespace) -> int:
    from reminders.local import pipeline
    from reminders.local.twin import on_stack

    rt = _runtime()
    twin = _on_twin(rt, "tick")
    if twin is not None:  # one firing of the template's rule: the scanner function
        try:
            with _twin_alarms(twin):
                summary = twin.tick()
        finally:
            on_stack.close(twin)
        if "error" in summary:
            from reminders.errors import CommandFailed

            error = summary["error"] or {}
            raise CommandFailed(f"tick: the scanner function failed: {error.get('errorType')}: "
                                f"{error.get('errorMessage')}", code=EXIT_NOT_DONE)
    else:
        with _local_alarms(rt) as observe:
            summary = pipeline.tick(rt, observe=observe)
    emit(args, summary, f"leased {summary['leased']}, published {summary['published']}, "
                        f"released {summary['released']}, "
                        f"reclaimed {_counts_text(summary['reclaimed'])}")
    return 0


WORK_EXIT_STATUSES = (
    "exit status: 0 the queues emptied and no record failed; 1 the queues did not empty within "
    "the bounds; 4 some records failed or an invocation raised (a partial failure: the counts "
    "and the first error go to stderr, and the failed records are retried, dead-lettered or "
    "parked as in Lambda); 2 a bad argument; 5 the database or AWS unreachable.")


def cmd_work(args: argparse.Namespace) -> int:
    from reminders.local import pipeline
    from reminders.local.twin import on_stack

    rt = _runtime()
    twin = _on_twin(rt, "work")
    if twin is not None:  # the template's event source mappings and functions
        try:
            with _twin_alarms(twin), progress(args, "work") as shown:
                shown.show("the template's functions on the twin", left=args.max_seconds,
                           force=True)
                summary = twin.work(max_seconds=args.max_seconds)
        finally:
            on_stack.close(twin)
    else:
        def show(counts: dict[str, Any], left: float) -> None:
            shown.show(f"consumer {_progress_counts(counts['consumer'])}, redrive "
                       f"{_progress_counts(counts['redrive'])}", left=left)

        with _local_alarms(rt) as observe, progress(args, "work") as shown:
            shown.show("polling the queues", left=args.max_seconds, force=True)
            summary = pipeline.work(rt, max_seconds=args.max_seconds, observe=observe,
                                    progress=show)
    emit(args, summary, f"consumer: {_work_counts(summary['consumer'])}; "
                        f"redrive: {_work_counts(summary['redrive'])}; "
                        + ("queues empty" if summary["idle"] else "queues not empty"))
    not_idle = f"the queues did not empty within {args.max_seconds:g}s"
    if summary["failed_records"] or summary["invocation_errors"]:
        tail = "" if summary["idle"] else f"; {not_idle}"
        sys.stderr.write(f"reminders: work: partial failure: {_work_failures(summary)}{tail}\n")
        return EXIT_PARTIAL_FAILURE
    if not summary["idle"]:
        sys.stderr.write(f"reminders: work: {not_idle}\n")
        return EXIT_NOT_DONE
    return 0


def _positive_minutes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of minutes, 1 or more, "
                                         f"got {text!r}")
    return value


def _counts_text(value: Any) -> str:
    """``{"unknown": 2, "retrying": 1}`` as ``2 unknown, 1 retrying``; a number as itself."""
    if isinstance(value, dict):
        parts = [f"{n} {name}" for name, n in value.items() if n]
        return ", ".join(parts) if parts else "0"
    return str(value)


def _progress_counts(counts: dict[str, Any]) -> str:
    return f"{counts['records']} records ({counts['failures']} failed)"


def _work_counts(counts: dict[str, Any]) -> str:
    return (f"{counts['batches']} batches, {counts['records']} records, "
            f"{counts['failures']} failed, {counts['errors']} invocations raised")


def _work_failures(summary: dict[str, Any]) -> str:
    """One line: per function what failed, then the first invocation error, if one raised."""
    parts = [f"{name} {summary[name]['failures']} of {summary[name]['records']} records "
             f"failed, {summary[name]['errors']} invocations raised"
             for name in ("consumer", "redrive")]
    first = next((f"{name}: {summary[name]['first_error']}" for name in ("consumer", "redrive")
                  if summary[name]["first_error"]), None)
    why = f"first error: {first}" if first else "the handlers' log lines above say why"
    return "; ".join([*parts, why])


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("migrate", help="apply database migrations",
                       description="E.g. `DATABASE_URL=postgresql://... reminders migrate`.")
    _json_flag(p)
    p.set_defaults(func=cmd_migrate)

    local = sub.add_parser("local", help="the one-machine stack",
                           description="E.g. `reminders local up`, then `reminders local down`.")
    local_sub = local.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = local_sub.add_parser("up", help="start Postgres, moto and the webhook receiver",
                             description="E.g. `eval \"$(reminders local up --env)\"`.")
    p.add_argument("--env", action="store_true",
                   help="print DATABASE_URL (and PGHOST, PGPORT, PGDATABASE), RECEIVER_URL and "
                        "RECEIVER_SECRET as shell exports, for eval")
    p.add_argument("--explain", action="store_true",
                   help="start nothing; print, per resource type of the synthesized template, "
                        "how it runs here (real, stand-in or not run)")
    _json_flag(p)
    _quiet_flag(p)
    p.set_defaults(func=cmd_local_up)
    p = local_sub.add_parser(
        "serve", help="run the local stack's schedule rule and event source mappings on the "
                      "wall clock until Ctrl-C",
        description="Keep the template's rule (the scanner each minute) and its event source "
                    "mappings (consumer, redrive) running on the stack `reminders local up` "
                    "started, on the twin, so that what an app schedules is delivered with no "
                    "`reminders work` by hand. One line a minute says what was done; SIGINT "
                    "(Ctrl-C) or SIGTERM stops it within a few seconds (exit status 0). "
                    "Refused when the local stack is not running. E.g. `reminders local serve`.")
    p.add_argument("--max-minutes", type=_positive_minutes, default=1440,
                   help="stop after this many minutes at the latest (default: 1440, a day)")
    _json_flag(p)
    p.set_defaults(func=cmd_local_serve)
    p = local_sub.add_parser("down", help="stop them",
                             description="E.g. `reminders local down --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_local_down)

    p = sub.add_parser("tick", help="one scanner pass",
                       description="E.g. `REMINDERS_NOW=2027-03-01T09:00:00Z reminders tick`.")
    _json_flag(p)
    p.set_defaults(func=cmd_tick)
    p = sub.add_parser("work", help="run the consumer and redrive loops until the queues idle",
                       description="Feed the queues to the consumer and redrive handlers, as "
                                   "Lambda's event source mappings do, until the queues are "
                                   "empty or --max-seconds has passed. E.g. `reminders "
                                   "work --max-seconds 30 --json`.",
                       epilog=WORK_EXIT_STATUSES)
    _json_flag(p)
    _quiet_flag(p)
    p.add_argument("--max-seconds", type=_seconds, default=60.0,
                   help="wall-time bound, more than 0 (default: 60)")
    p.set_defaults(func=cmd_work)
