"""``demo`` and ``drill``: the pipeline on one machine on a simulated clock, and its fault
drills."""

from __future__ import annotations

import argparse
from typing import Any

from reminders.cli.common import _json_flag, _quiet_flag, emit, progress
from reminders.outcome import EXIT_NOT_DONE


def cmd_demo(args: argparse.Namespace) -> int:
    from reminders.local import demo

    return demo.main(json_output=args.json)


DRILLS = ("consumer-kill", "scanner-kill", "terminate-backends", "postgres-restart",
          "racing-scanners", "consumer-outage", "duplicate-message", "garbage")


_DRILL_EPILOG = """drills:
  consumer-kill       kill -9 of the consumer function's processes while one waits on a send
  scanner-kill        kill -9 of the scanner function's process once its leases are committed
  terminate-backends  pg_terminate_backend of the service's sessions mid-work
  postgres-restart    Postgres stopped and started again mid-work
  racing-scanners     four scanners start every tick together
  consumer-outage     no consumer for an hour of simulated time, the scanner ticking on
  duplicate-message   copies of lease messages, one taken while its send is in flight, and
                      messages of old leases on the deliveries queue and the dead-letter queue
  garbage             garbage bodies on the deliveries queue and the dead-letter queue

The drills run on a Postgres and a moto server of their own (started in a temporary directory
and removed afterwards; a running `reminders local up` stack is left alone), each drill on its
own database and queues, on a simulated clock, with the synthesized template's functions,
event source mappings and rule on the twin (each function from its built assets in processes
of its own; where no template or no CPython 3.13 can be had, the report says so and the
handlers run in the drill's process).

exit status: 0 when no drill found a violation, 1 when one did, 2 on a bad argument."""


def cmd_drill(args: argparse.Namespace) -> int:
    from reminders.local import drills

    names = list(DRILLS) if args.name == "all" else [args.name]
    ran: list[drills.DrillResult] = []

    def running() -> None:
        found = sum(len(r.violations) for r in ran)
        shown.show(f"running {names[len(ran)]}, {found} violation(s) so far", done=len(ran),
                   total=len(names), force=True)

    def show(result: drills.DrillResult) -> None:
        ran.append(result)
        shown.clear()
        if not args.json:
            print(drills.text(result) + "\n", flush=True)
        if len(ran) < len(names):
            running()

    with progress(args, "drill") as shown:
        running()
        results = drills.run_drills(names, short=args.short, on_result=show)
    found = sum(len(r.violations) for r in results)
    emit(args, {"short": args.short, "violations": found,
                "drills": [r.as_json() for r in results]},
         f"{len(results)} drill(s), {found} violation(s)")
    return 0 if found == 0 else EXIT_NOT_DONE


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on one machine, on a simulated clock",
                       description="E.g. `reminders demo` (or `make demo`).")
    _json_flag(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("drill", help="inject a fault into the pipeline on one machine and count "
                                     "the invariants broken (exit 1 if any)",
                       description="Run a fault drill: schedule a batch, inject the fault, run "
                                   "the clock on until everything due has an outcome, and "
                                   "report what was done, the time to recover and every "
                                   "violation of the invariants found (the goal is none). "
                                   "E.g. `reminders drill consumer-kill --short --json`.",
                       epilog=_DRILL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=[*DRILLS, "all"], metavar="NAME|all",
                   help="a drill (listed below), or all of them")
    p.add_argument("--short", action="store_true",
                   help="smaller batches, as CI runs them")
    _json_flag(p)
    _quiet_flag(p)
    p.set_defaults(func=cmd_drill)
