"""``reminders console``: the delivery console on this machine."""

from __future__ import annotations

import argparse
import os
from typing import Any

from reminders.cli.common import _aws_environment, _count, _settings, environment
from reminders.cli.recovery import local_alarms


def cmd_console(args: argparse.Namespace) -> int:
    """The delivery console: a web page on this machine against the database and queues this
    command line is configured for. Its modules load only here (never in a Lambda handler)."""
    from reminders import operator
    from reminders.clock import clock_from_env
    from reminders.console import serve

    serve.require_packages()
    if args.demo:  # the last demo's database at its simulated time, on the local stack
        from reminders.local import demo

        for key, value in demo.console_environment().items():
            if key in ("DATABASE_URL", "REMINDERS_NOW") or key not in os.environ:
                os.environ[key] = value
    settings = _settings()
    _aws_environment()
    clock = clock_from_env(environment())

    def connect() -> Any:
        from reminders import db

        return db.connect(settings.database_url, prepare=settings.db_prepare,
                          application_name="reminders-console", readable_instants=True)

    serve.run(serve.ConsoleContext(connect=connect, now=clock.now,
                                   queues=lambda: operator.queue_counts(settings),
                                   actor=operator.current_user(), refresh_seconds=args.refresh,
                                   read_timeout_ms=args.statement_timeout * 1000,
                                   alarms=local_alarms),
              host=args.host, port=args.port, extra_hosts=tuple(args.allowed_host),
              behind_proxy=args.behind_proxy)
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("console", help="the delivery console: a web page on 127.0.0.1",
                       description="Serve the delivery console (overview, attention list, "
                                   "a delivery's story, operator actions) against the database "
                                   "and queues this command line is configured for, on this "
                                   "machine only by default. E.g. `reminders console --port "
                                   "8765`, then open http://127.0.0.1:8765/.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; on any "
                        "other address every browser needs the access token printed at start, "
                        "or --behind-proxy)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the console also answers to (its Host header, port "
                        "aside), beside this machine's and the --host address; repeatable")
    p.add_argument("--behind-proxy", metavar="HEADER",
                   help="the header an authenticating proxy in front sets (e.g. "
                        "X-Forwarded-User): requests without it are refused, and no token is "
                        "needed")
    p.add_argument("--port", type=_count("--port", 1, 65535), default=8765,
                   help="port to listen on (default 8765)")
    p.add_argument("--refresh", type=_count("--refresh", 2, 3600), default=10,
                   help="seconds between the overview's refreshes (default 10)")
    p.add_argument("--statement-timeout", type=_count("--statement-timeout", 1, 600),
                   default=15, help="seconds a page's query may run at most (default 15)")
    p.add_argument("--demo", action="store_true",
                   help="on the last `reminders demo`'s database, at its simulated time "
                        "(starts the local stack if it is down)")
    p.set_defaults(func=cmd_console)
