"""Fault drills: the real pipeline on one machine, a fault injected, the clock run on until
everything due has an outcome again, and the invariants checked from outside all along.

Each drill runs on its own database and its own three queues, with its own webhook receiver and
its own simulated clock (a minute per scanner tick), inside a :class:`Lab`: the Postgres and moto
servers a caller hands over (the tests' session servers), or ones the lab starts in a temporary
directory and removes afterwards (``reminders drill``). The user's ``reminders local up`` stack is
never touched. A drill removes its database and queues when it ends, however it ends.

A drill schedules a realistic batch (webhooks to the local receiver and e-mail through moto's
SES, due over five minutes), injects its fault, then runs scanner ticks and the consumer and
redrive functions until every delivery whose time has come has an outcome, or a bound of
simulated minutes is reached. The functions run on the drill's own twin of the synthesized
template (:class:`reminders.local.twin.run.Twin`): each from its built assets in processes of
its own, the schedule rule's firings and the event source mappings' pollers as the template
states them; a kill drill kills a function's process mid-invocation. Where no template or no
CPython 3.13 can be had, the result says so (``functions``, ``functions_note``) and the real
handlers run in this process (``reminders`` commands in subprocesses where a process must
die). After every tick it checks :func:`reminders.invariants.check`; at the end
:func:`reminders.invariants.unsettled` and what the drill itself promises (all sent after an
outage, garbage parked with a reason, ...).

The result says what was done, how long recovery took (simulated and wall seconds from the
fault, or the end of an outage, to the first check at which every delivery due had an outcome
again), the deliveries by state, every violation found (the goal is none), where the functions
ran (and in which processes), and the alarms of the synthesized template that fired and when:
they are evaluated every simulated minute from what the functions emitted, their invocations
and the queues sampled at each rule firing (:mod:`reminders.local.twin.watch` in process).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, cast

from reminders import config, db, endpoints, invariants, operator, schedules
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock, SharedClock, iso
from reminders.db import migrate
from reminders.db.queries import CHECKS
from reminders.errors import RemindersError
from reminders.local import pipeline, pooler, roles, stack
from reminders.local.receiver import WebhookReceiver
from reminders.local.twin.board import AlarmBoard
from reminders.local.twin.run import Twin, TwinError
from reminders.local.twin.watch import AlarmWatch, watch_template
from reminders.observability import NoMetrics
from reminders.queue import Queue
from reminders.runtime import Runtime, build_channels, secret_box

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
TICK = timedelta(minutes=1)
SPREAD_MINUTES = 5           # the batch falls due over this many minutes
TENANT = "drill"
SLOW_SECONDS = 0.6           # the slow endpoint's answer time: a window to strike mid-send
SERVICE_APPLICATION = "reminders"        # what the service's sessions call themselves
CHECKER_APPLICATION = "reminders-drill"  # the drill's own session: never terminated
TERMINAL = ("sent", "failed", "suppressed", "stale", "unknown", "dead")
WAIT_SECONDS = 30.0          # wall-time bound on waiting for a subprocess to reach a point
# Quiet minutes after a drill for its alarms: a five-minute period completes and is evaluated
# within six; and at most this many, waiting for the alarms to clear.
ALARM_TAIL_MINUTES = 6
ALARM_TAIL_BOUND = 20
RACING_SCANNERS = 4  # scanners invoked at once by the racing-scanners drill


@dataclass(frozen=True)
class Size:
    webhooks: int
    emails: int
    garbage: int        # garbage bodies on each of the deliveries queue and the DLQ
    bound_minutes: int  # simulated minutes a drill waits for recovery after its fault
    outage_minutes: int = 60


FULL = Size(webhooks=200, emails=20, garbage=240, bound_minutes=120)
SHORT = Size(webhooks=40, emails=5, garbage=70, bound_minutes=60)  # every garbage shape twice


@dataclass
class DrillResult:
    name: str
    title: str
    short: bool
    did: list[str]
    recovered: bool
    recovery_simulated_seconds: float | None
    recovery_wall_seconds: float | None
    states: dict[str, int]
    violations: list[str]
    wall_seconds: float
    faults: int = 0  # how many times the fault landed (0: the drill tested nothing)
    # The alarms that went to ALARM (alarm, at, minutes after the start, cleared_at or None);
    # None: not evaluated (no template to read them from).
    alarms: list[dict[str, Any]] | None = None
    alarms_note: str | None = None
    # Where the service's functions ran: "twin" (the template's functions from their built
    # assets, each in processes of its own) or "in-process" (the handlers in the drill's own
    # process, and `reminders` commands in subprocesses), with why not on the twin.
    functions: str = "in-process"
    functions_note: str | None = None
    function_pids: dict[str, list[int]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- the servers


@dataclass(frozen=True)
class Server:
    """A Postgres server: ``direct`` creates and migrates databases, and clients reach them
    through ``bouncer`` (the local stand-in for RDS Proxy) where there is one."""

    direct: str
    bouncer: pooler.Pooler | None = None

    def pooled(self, url: str) -> str:
        """``url`` (a database on this server) as the service's clients reach it."""
        return url if self.bouncer is None else self.bouncer.url(url)


class Lab:
    """Postgres (behind PgBouncer) and moto for drills. URLs given are used as they are (and
    left running); whatever is missing is started in a temporary directory and removed by
    :meth:`close`."""

    def __init__(self, postgres_url: str | None = None, endpoint_url: str | None = None, *,
                 bouncer: pooler.Pooler | None = None) -> None:
        self.postgres_url = postgres_url or ""  # the server itself (not the pooler)
        self.endpoint_url = endpoint_url or ""
        self.bouncer = bouncer
        self.pgdata: Path | None = None          # set when the lab owns its Postgres
        self._own_bouncer: pooler.Pooler | None = None
        self._moto: subprocess.Popen[bytes] | None = None
        self.root = Path(tempfile.mkdtemp(prefix=f"reminders-drill-{os.getpid()}-"))

    @property
    def server(self) -> Server:
        return Server(self.postgres_url, self.bouncer)

    def __enter__(self) -> Lab:
        try:
            if not self.postgres_url:
                self.pgdata = self.root / "pgdata"
                self.postgres_url = stack.start_postgres(self.pgdata, keep_running=True)
                self.bouncer = self._own_bouncer = pooler.start(
                    self.postgres_url, self.root / "pooler", stack.free_port())
            if not self.endpoint_url:
                port = stack.free_port()
                credentials = self.root / stack.MOTO_ADMIN_FILE
                self._moto = subprocess.Popen(
                    [sys.executable, "-m", "reminders.local.moto_server", "--port", str(port),
                     "--credentials", str(credentials)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL, env=_child_environment())
                self.endpoint_url = f"http://127.0.0.1:{port}"
                stack.wait_moto(self.endpoint_url, credentials)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._moto is not None:
            self._moto.terminate()
            try:
                self._moto.wait(10)
            except subprocess.TimeoutExpired:
                self._moto.kill()
                self._moto.wait(5)
            self._moto = None
        if self._own_bouncer is not None:
            self._own_bouncer.stop()
            self._own_bouncer = None
        if self.pgdata is not None:
            stack.stop_postgres(self.pgdata)
            self.pgdata = None
        shutil.rmtree(self.root, ignore_errors=True)

    @contextmanager
    def restartable_postgres(self) -> Iterator[tuple[Server, Path]]:
        """A Postgres a drill may stop and start (the lab's own, or a private one), behind a
        pooler that stays up while it restarts, as RDS Proxy does through a failover."""
        if self.pgdata is not None:
            yield self.server, self.pgdata
            return
        name = uuid.uuid4().hex[:8]
        pgdata = self.root / f"pgdata-{name}"
        url = stack.start_postgres(pgdata, keep_running=True)
        bouncer: pooler.Pooler | None = None
        try:
            bouncer = pooler.start(url, self.root / f"pooler-{name}", stack.free_port())
            yield Server(url, bouncer), pgdata
        finally:
            if bouncer is not None:
                bouncer.stop()
            stack.stop_postgres(pgdata)
            shutil.rmtree(pgdata, ignore_errors=True)


def start_postgres_again(pgdata: Path) -> None:
    """Start a Postgres that :func:`reminders.local.stack.stop_postgres` stopped."""
    from reminders.local import postgres_binaries

    postgres_binaries.embedded().get_server(pgdata, cleanup_mode=None).ensure_postgres_running()


def _child_environment() -> dict[str, str]:
    """This process's environment without any reminders, AWS or database setting."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("REMINDERS_", "AWS_")) and k != "DATABASE_URL"}


# ---------------------------------------------------------------- one drill's world


class Site:
    """One drill's own database, queues, receiver and clock; :meth:`close` removes them."""

    def __init__(self, lab: Lab, name: str, *, server: Server | None = None,
                 limits: dict[str, int] | None = None, visibility_timeout: int = 4,
                 max_receive_count: int = 3, on_twin: bool = True,
                 template: Any = None) -> None:
        suffix = f"{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.name = name
        self.server = server or lab.server
        self.server_url = self.server.direct
        self.endpoint = lab.endpoint_url
        self.limits = dict(limits or {})
        self.work_dir = lab.root / f"{name}-{suffix}"
        self.work_dir.mkdir(parents=True)
        self.db_name = f"drill_{name.replace('-', '_')}_{suffix}"
        self.clock: FixedClock = SharedClock(START, str(self.work_dir / "clock"))
        self.receiver = WebhookReceiver(secret=new_secret())
        self.processes: list[subprocess.Popen[bytes]] = []
        self._conn: db.Connection | None = None
        self._created_db = False
        self._queue_urls: list[str] = []
        self.rt: Runtime | None = None
        self.twin: Twin | None = None
        self.functions_note: str | None = None  # why the functions are not on the twin
        self.watch: AlarmWatch | None = None
        self.watch_note: str | None = None
        self._board: AlarmBoard | None = None
        try:
            direct = db.create_database(self.server_url, self.db_name)
            self._created_db = True
            with db.connect(direct) as conn:  # before any pooled session starts
                migrate.apply(conn)
            self.database_url = self.server.pooled(direct)
            self.secrets_key_id = stack.create_secrets_key(self.endpoint)
            stack.aws_client("ses", self.endpoint).verify_domain_identity(
                Domain=stack.SENDER_IDENTITY)
            prefix = f"drill-{suffix}"
            if on_twin:
                self.twin, self.functions_note = self._start_twin(
                    template, prefix, visibility_timeout, max_receive_count)
            if self.twin is not None:
                self._queue_urls = [q.url for q in self.twin.queues.values()]
                self.queues = self.twin.require_urls()
            else:
                self.queues = stack.prepare_aws(self.endpoint, prefix=prefix,
                                                visibility_timeout_override=visibility_timeout,
                                                max_receive_count_override=max_receive_count)
                self._queue_urls = [self.queues.deliveries, self.queues.dlq,
                                    self.queues.parking]
                self._watch_alarms()
            self.receiver.start()
            self.rt = self.runtime()
        except BaseException:
            self.close()
            raise

    def _start_twin(self, template: Any, prefix: str, visibility_timeout: int,
                    max_receive_count: int) -> tuple[Twin | None, str | None]:
        """The template's functions, queues, mappings and rule on this drill's database (or
        None and why, where the template or CPython 3.13 cannot be had). ``template``: the
        synthesized one when None."""
        if template is None:
            template, why = watch_template()
            if template is None:
                return None, why
        from reminders.local.twin.assets import AssetError, build_assets

        try:
            assets = build_assets()
        except AssetError as exc:
            return None, str(exc)
        limits = {f"REMINDERS_{k.upper()}": str(v) for k, v in self.limits.items()}
        twin = Twin(template, endpoint_url=self.endpoint, database_url=self.database_url,
                    prefix=prefix, clock=cast(SharedClock, self.clock),
                    log_dir=self.work_dir / "logs", secrets_key_arn=self.secrets_key_id,
                    visibility_timeout_override=visibility_timeout,
                    max_receive_count_override=max_receive_count, assets=assets,
                    extra_env={"REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32", **limits},
                    instances={"scanner": RACING_SCANNERS})
        self.twin = twin  # closed with the site, even when its start fails
        return twin.start(), None

    def _watch_alarms(self) -> None:
        template, self.watch_note = watch_template()
        if template is not None:
            self.watch = AlarmWatch.for_local_queues(
                template, self.clock, endpoint_url=self.endpoint, sqs=self.sqs(),
                deliveries_url=self.queues.deliveries)

    @property
    def board(self) -> AlarmBoard | None:
        """The template's alarms over what this drill's functions did (None: no template)."""
        if self.twin is not None:
            if self._board is None:
                self._board = self.twin.alarm_board()
            return self._board
        return self.watch.board if self.watch is not None else None

    def minute(self) -> None:
        """The alarms evaluated up to this simulated minute. On the twin the queues were
        sampled by this minute's rule firing (:meth:`Twin.tick`); in process, here."""
        if self.twin is not None:
            board = self.board
            if board is not None:
                board.advance(self.clock.now())
        elif self.watch is not None:
            self.watch.minute()

    def observe(self, function_name: str, seconds: float, error: bool) -> None:
        """An invocation of the drill's in-process handlers, for the alarms."""
        if self.watch is not None:
            self.watch.invoked(function_name, seconds, error)

    # --- the service's functions ----------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        """One firing of the schedule rule: the twin's scanner function, or the in-process
        handler. Raises RemindersError when the tick failed."""
        if self.twin is None:
            return pipeline.tick(self.service, observe=self.observe)
        answer = self.twin.tick()
        if "error" in answer:
            error = answer["error"] or {}
            raise RemindersError(f"{error.get('errorType')}: {error.get('errorMessage')}")
        return answer

    def work(self, max_seconds: float) -> dict[str, Any]:
        """The consumer's and the redrive function's mappings until both queues are idle."""
        if self.twin is None:
            return pipeline.work(self.service, max_seconds=max_seconds, observe=self.observe)
        return self.twin.work(max_seconds=max_seconds)

    def raise_template_fault(self) -> None:
        """A function of the twin that cannot start (a property of the template at fault:
        ``<logical id> <property>: ...``) ends the drill: it is no fault of the drill's."""
        if self.twin is not None and self.twin.init_problems:
            raise TwinError(self.twin.init_problems[0])

    def background(self, what: str, max_seconds: float = 60.0) -> Background:
        """``work`` (the mappings) or ``tick`` (one rule firing) running beside the drill, for
        a fault to strike while it is under way: on the twin in a thread of this process
        (the functions run in processes of their own, which :meth:`Background.kill` kills);
        in process, ``reminders work``/``tick`` in a process of its own, each function as its
        role."""
        if self.twin is None:
            args = ("work", "--max-seconds", f"{max_seconds:g}") if what == "work" \
                else ("tick",)
            return ProcessJob(self.spawn(*args), f"`reminders {what}`")
        twin = self.twin
        if what == "work":
            return TwinJob(lambda: twin.work(max_seconds=max_seconds), twin, "consumer",
                           "the consumer's event source mapping")
        return TwinJob(twin.tick, twin, "scanner", "the schedule rule's invocation of the "
                                                   "scanner")

    # --- settings and connections ------------------------------------------------------

    def settings_env(self) -> dict[str, str]:
        env = {"DATABASE_URL": self.database_url,
               "REMINDERS_QUEUE_URL": self.queues.deliveries,
               "REMINDERS_DLQ_URL": self.queues.dlq,
               "REMINDERS_PARKING_QUEUE_URL": self.queues.parking,
               "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32",
               "REMINDERS_EMAIL_SENDER": stack.SENDER,
               "REMINDERS_SECRETS_KEY_ID": self.secrets_key_id}
        env.update({f"REMINDERS_{k.upper()}": str(v) for k, v in self.limits.items()})
        return env

    def runtime(self) -> Runtime:
        """The handlers' runtime on the drill's clock. Its own clients are the drill's hands
        (moto's administrator: set-up and checks); scanner, consumer, redrive and ops each run
        with their role's (``Runtime.for_function``), granted what the template grants them."""
        settings = config.load(self.settings_env())

        def client(service: str, client_config: Any = None) -> Any:
            return stack.service_client(service, self.endpoint, client_config)

        sqs = client("sqs")
        rt = Runtime(settings=settings, clock=self.clock,
                     metrics=self.watch.metrics if self.watch is not None else NoMetrics(),
                     deliveries=Queue(sqs, self.queues.deliveries),
                     dlq=Queue(sqs, self.queues.dlq), parking=Queue(sqs, self.queues.parking),
                     channels=build_channels(settings, client), rng=random.Random(7),
                     secret_box=secret_box(settings, client))
        # In process, each function as its role; without the CDK installed (no template), as
        # the administrator, which the drill's report does not depend on. On the twin this is
        # only the drill's own hands: its functions have roles of their own.
        if self.twin is None:
            roles.as_their_roles(rt, self.endpoint, self.queues, self.secrets_key_id)
        return rt

    @property
    def service(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    @property
    def conn(self) -> db.Connection:
        """The drill's own session (reconnecting after a fault broke it)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = db.connect(self.database_url, application_name=CHECKER_APPLICATION)
        return self._conn

    def reconnect(self) -> None:
        """Drop the drill's session (after a restart it is dead without knowing it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def sqs(self) -> Any:
        return stack.aws_client("sqs", self.endpoint)

    def limit(self, name: str) -> int:
        value: int = getattr(self.service.settings.limits, name)
        return value

    # --- the batch ---------------------------------------------------------------------

    def hook(self, name: str, **script: Any) -> str:
        url = self.receiver.hook_url(name, **script)
        box = self.service.secret_box
        assert box is not None
        endpoints.register(self.conn, box, tenant=None, url=url, secret=self.receiver.secret,
                           now=self.clock.now())
        return url

    def schedule_batch(self, size: Size, *, slow: int = 0) -> Batch:
        """Webhooks and e-mails due over :data:`SPREAD_MINUTES` from :data:`START`, and
        ``slow`` webhooks due at once to an endpoint that takes :data:`SLOW_SECONDS`."""
        fast = self.hook("drill")
        keys: dict[str, list[str]] = {"webhook": [], "email": [], "slow": []}
        now = self.clock.now()
        with db.transaction(self.conn):
            for minute in range(SPREAD_MINUTES):
                at = START + minute * TICK
                people = [f"user-{i:04d}" for i in range(size.webhooks)
                          if i % SPREAD_MINUTES == minute]
                if people:
                    keys["webhook"] += self._schedule(f"webhook-{minute}", people, "webhook",
                                                      at, now, to=fast)
                mailboxes = [f"user-{i:04d}@example.com" for i in range(size.emails)
                             if i % SPREAD_MINUTES == minute]
                if mailboxes:
                    keys["email"] += self._schedule(f"email-{minute}", mailboxes, "email", at,
                                                    now)
            if slow:
                url = self.hook("slow", delay=SLOW_SECONDS)
                keys["slow"] = self._schedule("slow", [f"slow-{i}" for i in range(slow)],
                                              "webhook", START, now, to=url)
        return Batch(webhooks=keys["webhook"], emails=keys["email"], slow=keys["slow"],
                     last_due=START + (SPREAD_MINUTES - 1) * TICK)

    def _schedule(self, key: str, recipients: list[str], channel: str, at: datetime,
                  now: datetime, to: str | None = None) -> list[str]:
        result = schedules.schedule(
            self.conn, tenant=TENANT, recipients=recipients, channel=channel, to=to, at=at,
            now=now, key=key, payload={"subject": "Drill", "text": f"{key} is due"})
        return [d.delivery_key for d in result.deliveries]

    # --- reads ---------------------------------------------------------------------------

    def pending(self, at: datetime) -> int:
        row = db.fetch_one(self.conn, "drill_pending", {"now": at}, source=CHECKS) or {}
        return int(row.get("n") or 0)

    def leased(self) -> int:
        row = db.fetch_one(self.conn, "drill_leased", source=CHECKS) or {}
        return int(row.get("n") or 0)

    def deliveries(self) -> dict[str, db.Row]:
        return {r["delivery_key"]: r
                for r in db.fetch_all(self.conn, "drill_deliveries", source=CHECKS)}

    def attempts(self) -> dict[str, list[db.Row]]:
        out: dict[str, list[db.Row]] = {}
        for row in db.fetch_all(self.conn, "drill_attempts", source=CHECKS):
            out.setdefault(row["delivery_key"], []).append(row)
        return out

    def states(self) -> dict[str, int]:
        by_state = operator.status(self.conn, now=self.clock.now())["by_state"]
        return {k: int(v) for k, v in by_state.items() if v}

    # --- subprocesses --------------------------------------------------------------------

    def spawn(self, *args: str, extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A ``reminders`` command in its own process, on this drill's settings and clock. The
        command's own calls are moto's administrator's; ``tick`` and ``work`` run each function
        as its role, as this process does (REMINDERS_FUNCTION_ROLES)."""
        env = {**_child_environment(), **stack.AWS_TEST_ENV,
               **stack.credentials_env(stack.administrator(self.endpoint)),
               "AWS_ENDPOINT_URL": self.endpoint, "REMINDERS_FUNCTION_ROLES": "on",
               **self.settings_env(), "REMINDERS_NOW": iso(self.clock.now()),
               "REMINDERS_HOME": str(self.work_dir / "home"), "LOG_LEVEL": "WARNING",
               **(extra or {})}
        log = self.work_dir / f"{args[0]}-{len(self.processes)}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "reminders.cli", *args], env=env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        if self.twin is not None:
            self.twin.close()
        self.receiver.stop()
        if self.rt is not None:
            self.rt.close()
        if self._conn is not None:
            self._conn.close()
        if self._created_db:
            # When the server is gone (a restart drill failed), its directory goes with the lab.
            with suppress(RemindersError):
                db.drop_database(self.server_url, self.db_name)
        urls = self._queue_urls or [q.url for q in (self.twin.queues.values()
                                                    if self.twin is not None else [])]
        if urls:
            sqs = self.sqs()
            for url in urls:
                sqs.delete_queue(QueueUrl=url)
        shutil.rmtree(self.work_dir, ignore_errors=True)


class Background(Protocol):
    """Work under way beside a drill: ``poll`` and ``wait`` as :class:`subprocess.Popen`'s
    (None while it runs, else its exit status), ``kill`` the fault."""

    label: str

    def poll(self) -> int | None: ...

    def wait(self, timeout: float) -> int: ...

    def kill(self) -> str: ...


class ProcessJob:
    """``reminders work``/``tick`` in a process of its own (the in-process fallback)."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str) -> None:
        self.proc, self.label = proc, label

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> str:
        """kill -9 of the process; what was killed."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return f"kill -9 of {self.label} (pid {self.proc.pid})"


class TwinJob:
    """A twin call (its mappings' work, or a rule firing) in a thread; :meth:`kill` is kill -9
    of the processes of ``function`` running an invocation, as a crash of the Lambda
    instance mid-invocation: Lambda sees the runtime exit (``Runtime.ExitError``), fails the
    batch (it comes back after the visibility timeout) or retries the asynchronous event. A
    killed work call stops its polling after the batches in flight, as a consumer that
    crashed handles nothing more; the drill's next rounds poll again."""

    def __init__(self, call: Callable[[], dict[str, Any]], twin: Twin, function: str,
                 label: str) -> None:
        self.twin, self.function, self.label = twin, function, label
        self.answer: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.killed: list[int] = []
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], dict[str, Any]]) -> None:
        try:
            self.answer = call()
        except BaseException as exc:  # noqa: BLE001 (kept for the drill's report)
            self.error = exc

    def poll(self) -> int | None:
        return None if self._thread.is_alive() else self._status()

    def wait(self, timeout: float) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(self.label, timeout)
        if not self.twin.init_problems:  # polling resumes in the drill's next rounds
            for poller in self.twin.pollers.values():
                poller.stopped.clear()
        return self._status()

    def _status(self) -> int:
        """0 done, 1 the queues not emptied, 4 a failure (as `reminders work` exits)."""
        if self.error is not None or self.answer is None or "error" in self.answer:
            return 4
        if self.answer.get("failed_records") or self.answer.get("invocation_errors"):
            return 4
        return 0 if self.answer.get("idle", True) else 1

    def kill(self) -> str:
        pids = self.twin.pools[self.function].busy_pids()
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.function == "consumer":
            for poller in self.twin.pollers.values():
                poller.stopped.set()
        self.killed = pids
        return (f"kill -9 of the {self.function} function's process"
                f"{'es' if len(pids) > 1 else ''} (pid {', '.join(map(str, pids))}) under "
                f"{self.label}" if pids else f"no {self.function} process was running an "
                                             "invocation: nothing was killed")


@dataclass
class Batch:
    webhooks: list[str]
    emails: list[str]
    slow: list[str]
    last_due: datetime

    @property
    def keys(self) -> list[str]:
        return self.webhooks + self.emails + self.slow

    def describe(self) -> str:
        slow = (f", {len(self.slow)} more to an endpoint that answers in {SLOW_SECONDS:g} s"
                if self.slow else "")
        return (f"scheduled {len(self.webhooks)} webhook and {len(self.emails)} e-mail "
                f"deliveries due {_hm(START)}-{_hm(self.last_due)}{slow}")


def _hm(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%H:%M")


# ---------------------------------------------------------------- running a drill


class Run:
    """What a drill does and finds: its lines, the fault instant, recovery, violations."""

    def __init__(self, site: Site, size: Size, pgdata: Path | None = None) -> None:
        self.site = site
        self.size = size
        self.pgdata = pgdata  # the Postgres this drill may stop and start
        self.did: list[str] = []
        self.batch: Batch | None = None
        self._found: dict[tuple[str, str], str] = {}
        self._said: set[str] = set()
        self.fault_at: datetime | None = None
        self.fault_wall: float | None = None
        self.fault_over = True
        self.faults = 0
        self.recovered = False
        self.recovery: tuple[float, float] | None = None

    # --- reporting -----------------------------------------------------------------------

    def say(self, line: str) -> None:
        self.did.append(line)

    def say_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.say(line)

    def when(self) -> str:
        minutes = int((self.site.clock.now() - START).total_seconds() // 60)
        return f"{_hm(self.site.clock.now())} (+{minutes}m)"

    def flag(self, rule: str, subject: str, detail: str) -> None:
        """A violation, kept once per rule and subject (the first time it was seen)."""
        if (rule, subject) not in self._found:
            self._found[(rule, subject)] = f"[{_hm(self.site.clock.now())}] {rule}: {subject}: " \
                                           f"{detail}"

    def fault(self, line: str, *, lasting: bool = False) -> None:
        """Say what was done, and start the recovery clock unless a fault is already being
        recovered from (a series of faults is timed from its first). A ``lasting`` fault (an
        outage) counts no recovery until :meth:`fault_ends`."""
        self.say(line)
        self.faults += 1
        if self.fault_at is None or self.recovered:
            self.fault_at = self.site.clock.now()
            self.fault_wall = time.monotonic()
            self.recovered, self.recovery = False, None
        self.fault_over = not lasting

    def fault_ends(self, line: str) -> None:
        self.say(line)
        self.fault_over = True

    def schedule(self, *, slow: int = 0) -> Batch:
        self.batch = self.site.schedule_batch(self.size, slow=slow)
        self.say(self.batch.describe())
        return self.batch

    # --- the pipeline ----------------------------------------------------------------------

    def tick(self) -> dict[str, Any] | None:
        try:
            return self.site.tick()
        except RemindersError as exc:
            self.site.raise_template_fault()
            self.say(f"the scanner tick at {self.when()} failed: {_first_line(exc)}")
            return None

    def work(self, max_seconds: float = 60.0) -> dict[str, Any] | None:
        try:
            out = self.site.work(max_seconds)
        except RemindersError as exc:
            self.site.raise_template_fault()
            self.say(f"the consumer loop at {self.when()} failed: {_first_line(exc)}")
            return None
        if not out["idle"]:
            self.say_once(f"the consumer loop did not empty the queues within {max_seconds:g} s "
                          f"of wall time at {self.when()}")
        return out

    def check(self) -> None:
        """The invariants at this instant; and, after a fault, whether everything due has an
        outcome again (the recovery)."""
        now = self.site.clock.now()
        for v in invariants.check(self.site.conn, now=now,
                                  receiver_stats=self.site.receiver.stats()):
            self.flag(v.rule, v.delivery_key, v.detail)
        self.site.minute()
        if (self.fault_at is not None and self.fault_over and not self.recovered
                and self.site.pending(now) == 0):
            self._recovered()

    def round(self, *, consumer: bool = True) -> None:
        """One simulated minute's work: a tick, the consumers (unless down), the checks."""
        self.tick()
        if consumer:
            self.work()
        self.check()

    def settle(self, *, minutes: int | None = None) -> bool:
        """Rounds a minute apart until the whole batch has an outcome, or the bound."""
        horizon = self.batch.last_due if self.batch else START
        for step in range(minutes or self.size.bound_minutes):
            if step:
                self.site.clock.advance(TICK)
            self.round()
            if self.site.pending(max(self.site.clock.now(), horizon)) == 0:
                return True
        return False

    def _recovered(self) -> None:
        assert self.fault_at is not None and self.fault_wall is not None
        self.recovered = True
        self.recovery = ((self.site.clock.now() - self.fault_at).total_seconds(),
                         round(time.monotonic() - self.fault_wall, 2))

    def finish(self) -> None:
        """The end-of-drill checks: (a)-(d) once more, (e), and the batch's fate."""
        self.check()
        now = self.site.clock.now()
        for v in invariants.unsettled_findings(self.site.conn, now):
            self.flag(v.rule, v.delivery_key, v.detail)
        left = self.site.pending(max(now, self.batch.last_due if self.batch else now))
        if left:
            self.flag("not recovered", f"drill {self.site.name}",
                      f"{left} deliveries of the batch without an outcome at {self.when()}, "
                      f"the bound of {self.size.bound_minutes} simulated minutes")
        elif self.fault_at is not None and not self.recovered:
            self.flag("not recovered", f"drill {self.site.name}",
                      "the batch has its outcomes, but never was everything due settled while "
                      "the drill checked")

    def settle_alarms(self) -> None:
        """Quiet rounds after the drill, a minute apart, so that the alarms its fault
        provoked are evaluated (a five-minute alarm fires once its period is over) and seen
        to clear: at least :data:`ALARM_TAIL_MINUTES`, then until none is in ALARM (bounded)."""
        board = self.site.board
        if board is None:
            return
        for step in range(ALARM_TAIL_BOUND):
            if step >= ALARM_TAIL_MINUTES and not board.in_alarm():
                break
            self.site.clock.advance(TICK)
            self.round()

    def result(self, name: str, title: str, short: bool, began: float) -> DrillResult:
        sim, wall = self.recovery if self.recovery else (None, None)
        board = self.site.board
        return DrillResult(name=name, title=title, short=short, did=self.did,
                           recovered=self.recovered, recovery_simulated_seconds=sim,
                           recovery_wall_seconds=wall, states=self.site.states(),
                           violations=list(self._found.values()),
                           wall_seconds=round(time.monotonic() - began, 2), faults=self.faults,
                           alarms=None if board is None else fired_alarms(board, START),
                           alarms_note=self.site.watch_note,
                           functions="in-process" if self.site.twin is None else "twin",
                           functions_note=self.site.functions_note,
                           function_pids=self.function_pids())

    def function_pids(self) -> dict[str, list[int]]:
        """The processes each of the twin's functions ran in (none in process)."""
        twin = self.site.twin
        if twin is None:
            return {}
        return {name: sorted(pool.pids_seen) for name, pool in twin.pools.items()}

    # --- helpers the drills share ----------------------------------------------------------

    def wait_for(self, what: Callable[[], bool], proc: Background | None = None,
                 seconds: float = WAIT_SECONDS) -> bool:
        """Poll until ``what`` holds; False if ``proc`` ended first or time ran out."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if what():
                return True
            if proc is not None and proc.poll() is not None:
                return what()
            time.sleep(0.002)
        return False

    def finish_process(self, proc: Background, label: str, seconds: float = 90.0) -> None:
        try:
            code = proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            with suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            self.say(f"{label} did not finish within {seconds:g} s and was killed")
            return
        self.say(f"{label} ended with status {code}")

    def slow_requests(self) -> int:
        return int(self.site.receiver.stats()["by_endpoint"].get("slow", 0))

    def slow_requests_reach(self, n: int) -> Callable[[], bool]:
        return lambda: self.slow_requests() >= n

    def receiver_saw(self, key: str) -> Callable[[], bool]:
        return lambda: key in self.site.receiver.stats()["requests"]

    def ledger_line(self) -> str:
        attempts = self.site.attempts()
        total = sum(len(a) for a in attempts.values())
        open_ = sum(1 for a in attempts.values() for x in a if x["finished_at"] is None)
        seen = sum(self.site.receiver.stats()["requests"].values())
        return f"the receiver had seen {seen} requests; the ledger held {total} attempts, " \
               f"{open_} of them open"

    def expect_all_sent(self, rule: str, *, settled_only: bool = False) -> None:
        """Every delivery of the batch sent (or, ``settled_only``, none settled otherwise)."""
        rows = self.site.deliveries()
        for key in self.batch.keys if self.batch else []:
            row = rows[key]
            if row["state"] != "sent" and (row["state"] in TERMINAL or not settled_only):
                why = f" ({row['reason']})" if row["reason"] else ""
                self.flag(rule, key, f"ended {row['state']}{why}")


def fired_alarms(board: AlarmBoard, start: datetime) -> list[dict[str, Any]]:
    """Each time an alarm that pages went to ALARM: when (and minutes after ``start``), and
    when it was OK again (None: still in ALARM at the end)."""
    from reminders.local.twin.alarms import ALARM
    from reminders.local.twin.board import short_name

    found: list[dict[str, Any]] = []
    transitions = board.transitions()
    paging = set(board.fired())
    for i, t in enumerate(transitions):
        if t not in paging:
            continue
        cleared = next((u.at for u in transitions[i + 1:]
                        if u.alarm == t.alarm and u.new != ALARM), None)
        found.append({"alarm": short_name(t.alarm), "at": iso(t.at),
                      "minutes": int((t.at - start).total_seconds() // 60),
                      "cleared_at": None if cleared is None else iso(cleared),
                      "reason": t.reason})
    return found


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def peek(site: Site, url: str) -> list[dict[str, Any]]:
    """Every message on a queue, read and made visible again at once."""
    sqs = site.sqs()
    got: list[dict[str, Any]] = []
    while True:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                     AttributeNames=["All"], MessageAttributeNames=["All"])
        messages = answer.get("Messages", [])
        if not messages:
            break
        got += messages
    for start in range(0, len(got), 10):
        sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(got[start:start + 10])])
    return got


def drain(site: Site, url: str) -> list[dict[str, Any]]:
    """Every message on a queue, received and deleted."""
    sqs = site.sqs()
    got: list[dict[str, Any]] = []
    while True:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                     AttributeNames=["All"], MessageAttributeNames=["All"])
        messages = answer.get("Messages", [])
        if not messages:
            return got
        got += messages
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])


def send_bodies(site: Site, url: str, bodies: list[str]) -> None:
    sqs = site.sqs()
    for start in range(0, len(bodies), 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": body}
            for i, body in enumerate(bodies[start:start + 10])])


def _lease(body: str) -> tuple[int, str]:
    data = json.loads(body)
    return int(data["delivery_id"]), str(data["lease_token"])


# ---------------------------------------------------------------- the drills


def consumer_kill(run: Run) -> None:
    batch = run.schedule(slow=3)
    run.tick()
    job = run.site.background("work")
    run.say(f"a scanner tick at {run.when()} leased what was due; {job.label} started")
    if not run.wait_for(lambda: run.slow_requests() >= 1, job):
        run.say("the consumer finished before it reached a slow send: nothing was killed")
    else:
        time.sleep(0.1)  # it is waiting on the receiver's answer now
        killed = job.kill()
        if _landed(killed):
            run.fault(f"{killed} mid-batch, while it waited on a send: {run.ledger_line()}")
        else:
            run.say(killed)
    run.finish_process(job, job.label)
    run.settle()
    run.say(f"after the kill: {len(batch.slow)} slow deliveries took "
            f"{sum(len(run.site.attempts().get(k, [])) for k in batch.slow)} attempts")


def _landed(killed: str) -> bool:
    return not killed.endswith("nothing was killed")


def scanner_kill(run: Run) -> None:
    batch = run.schedule()
    run.site.clock.set(batch.last_due)
    run.say(f"the clock stood at {run.when()}: the whole batch was due at once")
    job = run.site.background("tick")
    if run.wait_for(lambda: run.site.leased() > 0, job) and job.poll() is None:
        killed = job.kill()
        leased, published = run.site.leased(), run.site.service.deliveries.depth()
        where = ("before it published a message" if published == 0 else
                 f"after it published {published} of {leased} messages" if published < leased
                 else "after it published every message (too late to strike mid-publish)")
        if _landed(killed):
            run.fault(f"{killed} once its leases were committed: {leased} deliveries leased, "
                      f"killed {where}")
        else:
            run.say(killed)
        run.finish_process(job, job.label)
    else:
        status = job.wait(10)
        run.say(f"{job.label} ended (status {status}) before the kill: nothing was killed")
    run.settle()


def terminate_backends(run: Run) -> None:
    batch = run.schedule(slow=3)
    run.tick()
    job = run.site.background("work")
    run.say(f"a scanner tick at {run.when()} leased what was due; {job.label} started")
    for n in range(1, len(batch.slow) + 1):
        if not run.wait_for(run.slow_requests_reach(n), job):
            run.say("the consumer finished before its next slow send")
            break
        time.sleep(0.1)
        ended = db.fetch_one(run.site.conn, "drill_terminate_service",
                             {"application": SERVICE_APPLICATION}, source=CHECKS) or {}
        run.fault(f"pg_terminate_backend of {ended.get('n', 0)} service session(s) while the "
                  f"consumer waited on slow send {n}: {run.ledger_line()}")
    run.finish_process(job, job.label)
    run.settle()


def postgres_restart(run: Run) -> None:
    assert run.pgdata is not None
    run.schedule(slow=3)
    run.tick()
    job = run.site.background("work")
    run.say(f"a scanner tick at {run.when()} leased what was due; {job.label} started")
    if not run.wait_for(lambda: run.slow_requests() >= 1, job):
        run.say("the consumer finished before it reached a slow send")
    time.sleep(0.1)
    line = run.ledger_line()
    began = time.monotonic()
    stack.stop_postgres(run.pgdata)
    run.fault(f"Postgres stopped (fast shutdown) while the consumer waited on a send: {line}",
              lasting=True)
    time.sleep(1.5)
    run.tick()  # the scanner's next invocation finds no database
    start_postgres_again(run.pgdata)
    run.site.reconnect()
    run.fault_ends(f"Postgres started again after {time.monotonic() - began:.1f} s of wall "
                   "time")
    run.finish_process(job, job.label)
    run.settle()


def racing_scanners(run: Run) -> None:
    batch = run.schedule()
    run.site.clock.set(batch.last_due)
    run.say(f"the clock stood at {run.when()}: the whole batch was due at once")
    budget = run.site.limit("inflight_budget")
    run.say(f"four scanners, each with its own connection, start every tick together "
            f"(batch {run.site.limit('scan_batch')}, in-flight budget {budget})")
    twin = run.site.twin
    runtimes = [] if twin is not None else [run.site.runtime() for _ in range(RACING_SCANNERS)]
    run.fault("the scanners race from the first tick on")
    try:
        for step in range(run.size.bound_minutes):
            if step:
                run.site.clock.advance(TICK)
            summaries = _race(runtimes, run.site.observe) if twin is None else \
                _race_on_twin(twin)
            messages = peek(run.site, run.site.queues.deliveries)
            leased = sum(s.get("leased", 0) for s in summaries)
            if leased:
                run.say(f"{run.when()}: the four scanners leased "
                        + " + ".join(str(s.get("leased", "failed")) for s in summaries)
                        + f"; {len(messages)} messages on the queue")
            _check_race(run, messages, budget)
            run.work()
            run.check()
            if run.site.pending(max(run.site.clock.now(), batch.last_due)) == 0:
                break
    finally:
        for rt in runtimes:
            rt.close()


def _race(runtimes: list[Runtime], observe: Callable[[str, float, bool], None]
          ) -> list[dict[str, Any]]:
    barrier = threading.Barrier(len(runtimes))
    out: list[dict[str, Any]] = [{} for _ in runtimes]

    def scan(i: int) -> None:
        barrier.wait()
        try:
            out[i] = pipeline.tick(runtimes[i], observe=observe)
        except RemindersError as exc:
            out[i] = {"error": _first_line(exc)}

    threads = [threading.Thread(target=scan, args=(i,)) for i in range(len(runtimes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _race_on_twin(twin: Twin) -> list[dict[str, Any]]:
    """Four invocations of the twin's scanner function at once, each in a process of its
    own, with the schedule rule's event (as overlapping firings would run them); the queues
    sampled once for the minute."""
    from reminders.local.twin.run import scheduled_event

    now = twin.clock.now()
    twin.sample_queues(now)
    event = scheduled_event(now, f"arn:aws:events:{stack.REGION}:000000000000:rule/drill")
    barrier = threading.Barrier(RACING_SCANNERS)
    out: list[dict[str, Any]] = [{} for _ in range(RACING_SCANNERS)]

    def scan(i: int) -> None:
        barrier.wait()
        try:
            result = twin.invoke("scanner", event)
        except RemindersError as exc:
            out[i] = {"error": _first_line(exc)}
            return
        out[i] = result.json() if result.ok else {"error": str((result.error or {}).get(
            "errorMessage"))}

    threads = [threading.Thread(target=scan, args=(i,)) for i in range(RACING_SCANNERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _check_race(run: Run, messages: list[dict[str, Any]], budget: int) -> None:
    if len(messages) > budget:
        run.flag("over the in-flight budget", "deliveries queue",
                 f"{len(messages)} messages after the scanners' tick; the budget is {budget}")
    rows = {int(r["id"]): r for r in run.site.deliveries().values()}
    seen = Counter(_lease(m["Body"]) for m in messages)
    by_delivery: dict[int, set[str]] = {}
    for (delivery_id, token), n in seen.items():
        key = rows[delivery_id]["delivery_key"] if delivery_id in rows else f"id {delivery_id}"
        by_delivery.setdefault(delivery_id, set()).add(token)
        if n > 1:
            run.flag("published twice for one lease", key,
                     f"{n} messages carry lease {token}")
    for delivery_id, tokens in by_delivery.items():
        if len(tokens) > 1:
            run.flag("leased twice at once", rows[delivery_id]["delivery_key"],
                     f"messages for {len(tokens)} different leases on the queue together")


OUTAGE_RULE = "an outage settled a delivery"


def consumer_outage(run: Run) -> None:
    run.schedule()
    run.fault(f"the consumer stops at {run.when()}; the scanner keeps ticking", lasting=True)
    for step in range(run.size.outage_minutes):
        if step:
            run.site.clock.advance(TICK)
        run.round(consumer=False)
        run.expect_all_sent(OUTAGE_RULE, settled_only=True)
    depth = run.site.service.deliveries.depth()
    run.say(f"after {run.size.outage_minutes} ticks without a consumer, at {run.when()}: "
            f"{depth} messages on the queue; deliveries "
            + ", ".join(f"{k} {v}" for k, v in run.site.states().items()))
    run.site.clock.advance(TICK)
    run.fault_ends(f"the consumer is back at {run.when()}")
    run.settle()
    run.expect_all_sent(OUTAGE_RULE)


def duplicate_message(run: Run) -> None:
    batch = run.schedule(slow=2)
    site = run.site
    deliveries, dlq = site.queues.deliveries, site.queues.dlq
    # 1. Copies of every real message, side by side with it.
    run.tick()
    slow_ids = _ids(site, batch.slow)
    bodies = [m["Body"] for m in drain(site, deliveries)]
    fast = [b for b in bodies if _lease(b)[0] not in slow_ids]
    slow = [b for b in bodies if _lease(b)[0] in slow_ids]
    send_bodies(site, deliveries, fast * 3)
    run.fault(f"at {run.when()}: each of the {len(fast)} lease messages on the queue three "
              "times")
    run.work()
    run.check()
    # 2. A copy taken by a second consumer while the first one is still sending.
    keys = {int(site.deliveries()[k]["id"]): k for k in batch.slow}
    for n, body in enumerate(slow, 1):
        key = keys[_lease(body)[0]]
        send_bodies(site, deliveries, [body])
        job = site.background("work")
        if run.wait_for(run.receiver_saw(key), job):
            send_bodies(site, deliveries, [body])
            run.say(f"slow message {n}: a copy handed to a second consumer while the first "
                    f"({job.label}) waited on its send")
            run.work()
        else:
            run.say(f"slow message {n}: the first consumer finished before its send")
        run.finish_process(job, job.label)
    run.check()
    # 3. Old leases: messages lost, their leases expire and are taken again, and then the
    # old messages turn up, on the deliveries queue and on the dead-letter queue.
    site.clock.advance(TICK)
    run.tick()
    messages = drain(site, deliveries)
    lost = [m["Body"] for m in messages[: len(messages) // 2]]
    send_bodies(site, deliveries, [m["Body"] for m in messages[len(messages) // 2:]])
    old_tokens = {_lease(b)[1] for b in lost}
    lost_ids = {_lease(b)[0] for b in lost}
    run.fault(f"at {run.when()}: {len(lost)} lease messages lost (deleted unread); their "
              "leases must expire")
    run.work()
    run.check()

    def leased_again() -> bool:
        rows = {int(r["id"]): r for r in site.deliveries().values()}
        return all(rows[i]["lease_token"] is not None
                   and str(rows[i]["lease_token"]) not in old_tokens for i in lost_ids)

    for _ in range(run.size.bound_minutes):
        site.clock.advance(TICK)
        run.tick()
        if leased_again():
            break
        run.work()
        run.check()
    send_bodies(site, deliveries, lost)
    send_bodies(site, dlq, lost)
    run.say(f"at {run.when()}: taken again under new leases; the {len(lost)} old-lease "
            "messages delivered beside the new ones, and to the dead-letter queue")
    run.work()
    run.check()
    run.settle()
    send_bodies(site, deliveries, lost)
    send_bodies(site, dlq, lost)
    run.say(f"at {run.when()}: the old-lease messages once more, after every outcome")
    run.work()
    run.check()
    for key, tries in site.attempts().items():
        for a in tries:
            if str(a["lease_token"]) in old_tokens:
                run.flag("attempt under an old lease", key,
                         f"attempt {a['attempt_no']} ran on lease {a['lease_token']}")
    _expect_one_send_each(run, batch)


def _ids(site: Site, keys: list[str]) -> set[int]:
    rows = site.deliveries()
    return {int(rows[k]["id"]) for k in keys}


def _expect_one_send_each(run: Run, batch: Batch) -> None:
    run.expect_all_sent("a duplicate changed the outcome")
    attempts = run.site.attempts()
    requests = run.site.receiver.stats()["requests"]
    for key in batch.keys:
        tries = attempts.get(key, [])
        if len(tries) > 1:
            run.flag("a duplicate caused a second send", key,
                     f"{len(tries)} attempts ("
                     + ", ".join(str(a["outcome"]) for a in tries) + ")"
                     + (f"; {requests[key]} requests at the receiver" if key in requests
                        else ""))


def garbage(run: Run) -> None:
    batch = run.schedule()
    site = run.site
    first = garbage_bodies(run.size.garbage, offset=10**9)
    dead_letters = garbage_bodies(run.size.garbage, offset=2 * 10**9)
    half = len(first) // 2
    send_bodies(site, site.queues.deliveries, first[:half])
    run.tick()
    send_bodies(site, site.queues.deliveries, first[half:])
    send_bodies(site, site.queues.dlq, dead_letters)
    run.fault(f"at {run.when()}: {len(first)} garbage bodies on the deliveries queue (around "
              f"the tick's lease messages) and {len(dead_letters)} on the dead-letter queue: "
              f"{len(GARBAGE_SHAPES)} shapes (not JSON, deep nesting, huge ids, wrong types, "
              "...)")
    bad = set(first) | set(dead_letters)
    failed = work_watching_batches(run, lambda body: body not in bad)
    keys = {int(r["id"]): k for k, r in site.deliveries().items()}
    for body, n in failed.items():
        run.flag("a good message failed with its batch", keys.get(_lease(body)[0], body),
                 f"the consumer failed its lease message {n} time(s) beside garbage; each "
                 "failure waits out the queue's visibility timeout (360 s deployed)")
    run.check()
    run.settle()
    _expect_on_time(run, batch)
    _expect_parked(run, first + dead_letters)


def work_watching_batches(run: Run, good: Callable[[str], bool],
                          max_seconds: float = 120.0) -> Counter[str]:
    """The consumer and redrive functions until both queues are idle (the twin's mappings,
    or the handlers in process as :func:`reminders.local.pipeline.work` runs them), counting
    how often the consumer failed a ``good`` message (its own or the whole batch's
    failure)."""
    failed: Counter[str] = Counter()

    def count(records: list[dict[str, Any]], answer: Any) -> None:
        ids = {f.get("itemIdentifier") for f in answer.get("batchItemFailures", [])} \
            if isinstance(answer, dict) else set()
        failed.update(r["body"] for r in records if r["messageId"] in ids and good(r["body"]))

    twin = run.site.twin
    if twin is not None:  # the consumer's mapping on the twin, its responses watched
        poller = twin.pollers["consumer"]
        invoke = poller.invoke

        def watched(event: dict[str, Any]) -> Any:
            records = event.get("Records", [])
            try:
                answer = invoke(event)
            except Exception:
                failed.update(r["body"] for r in records if good(r["body"]))
                raise
            count(records, answer)
            return answer

        poller.invoke = watched
        try:
            if not run.site.work(max_seconds)["idle"]:
                run.say(f"the queues were not idle after {max_seconds:g} s of wall time")
        finally:
            poller.invoke = invoke
        return failed

    from functions.consumer.handler import handler as consumer_handler
    from functions.redrive.handler import handler as redrive_handler
    from reminders import runtime
    from reminders.local.event_source import EventSource, run_until_idle

    def consumer(event: dict[str, Any], context: Any) -> dict[str, Any]:
        records = event.get("Records", [])
        try:
            answer = consumer_handler(event, context)
        except Exception:
            failed.update(r["body"] for r in records if good(r["body"]))
            raise
        count(records, answer)
        return answer

    rt = run.site.service
    runtime.install(rt)
    try:
        sources = [EventSource(rt.for_function("consumer").deliveries, consumer, "consumer",
                               stack.REGION, observe=run.site.observe),
                   EventSource(rt.for_function("redrive").dlq, redrive_handler, "redrive",
                               stack.REGION, observe=run.site.observe)]
        if not run_until_idle(sources, max_rounds=rt.settings.limits.work_rounds,
                              max_seconds=max_seconds):
            run.say(f"the queues were not idle after {max_seconds:g} s of wall time")
    finally:
        runtime.install(None)
    return failed


def _expect_on_time(run: Run, batch: Batch) -> None:
    run.expect_all_sent("garbage cost a delivery")
    rows = run.site.deliveries()
    attempts = run.site.attempts()
    late = []
    for key in batch.keys:
        sent = [a for a in attempts.get(key, []) if a["outcome"] == "sent"]
        if sent and sent[0]["started_at"] > rows[key]["occurrence_at"] + TICK:
            late.append(key)
            delay = (sent[0]["started_at"] - rows[key]["occurrence_at"]).total_seconds()
            run.flag("garbage delayed a delivery", key,
                     f"due {iso(rows[key]['occurrence_at'])}, sent {delay:.0f} s later "
                     "(on time is within one tick)")
    run.say(f"{len(batch.keys) - len(late)} of {len(batch.keys)} good deliveries were sent on "
            "time")


def _expect_parked(run: Run, injected: list[str]) -> None:
    parked = drain(run.site, run.site.queues.parking)
    with_reason = Counter(m["Body"] for m in parked
                          if "reason" in m.get("MessageAttributes", {}))
    without = Counter(m["Body"] for m in parked if "reason" not in m.get("MessageAttributes", {}))
    wanted = Counter(injected)
    good = 0
    for body, n in (with_reason + without).items():
        if body not in wanted:
            good += n
            run.flag("a lease message was parked", _label(body),
                     "a message the scanner published ended on the parking queue")
    for body, n in without.items():
        if body in wanted:
            run.flag("parked without a reason", _label(body),
                     f"{n} cop{'y' if n == 1 else 'ies'} moved to the parking queue by the "
                     "queue's redrive policy, with no reason recorded")
    for body, n in wanted.items():
        got = with_reason[body] + without[body]
        if got < n:
            run.flag("garbage not parked", _label(body), f"{n - got} of {n} never reached the "
                     "parking queue")
    run.say(f"parking queue: {sum(with_reason.values())} messages with a reason, "
            f"{sum(without.values())} without; {good} of them lease messages")


def _label(body: str) -> str:
    return f"body {body[:60]!r}" + (f"... ({len(body)} chars)" if len(body) > 60 else "")


def _deep(depth: int, i: int) -> str:
    return "[" * depth + str(i) + "]" * depth


GARBAGE_SHAPES: list[Callable[[int], str]] = [
    lambda i: f"{{not json {i}",
    lambda i: "",
    lambda i: " " * (1 + i % 5),
    lambda i: "null",
    lambda i: "true",
    lambda i: str(i),
    lambda i: f'"delivery {i}"',
    lambda i: f"[{i}, \"{uuid.UUID(int=i)}\"]",
    lambda i: "{}",
    lambda i: _deep(5_000, i),
    lambda i: '{"delivery_id":' * 2_000 + str(i) + "}" * 2_000,
    lambda i: json.dumps({"delivery_id": 10**30 + i, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": 2**63 + i, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": 2**63 - 1 - i, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: '{"delivery_id": ' + "9" * 5_000 + ', "lease_token": "x"}',
    lambda i: json.dumps({"delivery_id": str(i), "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": i + 0.5, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": True, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": None, "lease_token": None}),
    lambda i: json.dumps({"delivery_id": [i], "lease_token": {"t": i}}),
    lambda i: json.dumps({"delivery_id": -i - 1, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"delivery_id": 0, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: '{"delivery_id": NaN, "lease_token": "' + str(uuid.UUID(int=i)) + '"}',
    lambda i: '{"delivery_id": Infinity, "lease_token": null}',
    lambda i: json.dumps({"delivery_id": i, "lease_token": f"not-a-uuid-{i}"}),
    lambda i: json.dumps({"delivery_id": i, "lease_token": i}),
    lambda i: json.dumps({"lease_token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"id": i, "token": str(uuid.UUID(int=i))}),
    lambda i: json.dumps({"Records": [{"body": json.dumps({"delivery_id": i})}]}),
    lambda i: json.dumps({"Message": json.dumps({"delivery_id": i, "lease_token": "x"})}),
    lambda i: f"<delivery id=\"{i}\"/>",
    lambda i: "\ufeff" + json.dumps({"delivery_id": i, "lease_token": str(uuid.UUID(int=i))}),
    lambda i: "{\"delivery_id\": \"\u0661\u0662\u0663\", \"lease_token\": \"\u00e9\"}",
    lambda i: "A" * 100_000 + str(i),
]


def garbage_bodies(n: int, *, offset: int) -> list[str]:
    """``n`` bodies no consumer can act on, cycling through :data:`GARBAGE_SHAPES`; those that
    are well-formed name delivery ids from ``offset`` up, which no drill database holds."""
    return [GARBAGE_SHAPES[i % len(GARBAGE_SHAPES)](offset + i) for i in range(n)]


# ---------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Drill:
    name: str
    title: str
    body: Callable[[Run], None]
    limits: dict[str, int] = field(default_factory=dict)
    short_limits: dict[str, int] = field(default_factory=dict)
    restarts_postgres: bool = False


DRILLS: dict[str, Drill] = {d.name: d for d in [
    Drill("consumer-kill", "kill -9 of a consumer mid-batch", consumer_kill),
    Drill("scanner-kill", "kill -9 of a scanner mid-tick", scanner_kill),
    Drill("terminate-backends", "pg_terminate_backend of the service's sessions mid-work",
          terminate_backends),
    Drill("postgres-restart", "Postgres stopped and started mid-work", postgres_restart,
          restarts_postgres=True),
    Drill("racing-scanners", "four scanners racing on every tick", racing_scanners,
          limits={"scan_batch": 40, "inflight_budget": 100},
          short_limits={"scan_batch": 8, "inflight_budget": 20}),
    Drill("consumer-outage", "no consumer for an hour of simulated time", consumer_outage),
    Drill("duplicate-message", "copies of lease messages, and messages of old leases",
          duplicate_message),
    Drill("garbage", "garbage bodies on the deliveries queue and the dead-letter queue",
          garbage),
]}


def run_drill(name: str, lab: Lab, *, short: bool = False, template: Any = None
              ) -> DrillResult:
    """Run one drill in ``lab`` on a database and queues of its own; they are removed after.
    ``template``: the one its twin runs (the synthesized template when None)."""
    drill = DRILLS[name]
    size = SHORT if short else FULL
    began = time.monotonic()
    with ExitStack() as cleanup, _quiet_logs():
        server, pgdata = lab.server, None
        if drill.restarts_postgres:
            server, pgdata = cleanup.enter_context(lab.restartable_postgres())
        site = Site(lab, name, server=server,
                    limits=drill.short_limits if short and drill.short_limits else drill.limits,
                    template=template)
        cleanup.callback(site.close)
        run = Run(site, size, pgdata)
        drill.body(run)
        run.finish()
        run.settle_alarms()
        return run.result(name, drill.title, short, began)


def run_drills(names: list[str], *, short: bool = False, lab: Lab | None = None,
               on_result: Callable[[DrillResult], None] | None = None,
               template: Any = None) -> list[DrillResult]:
    """Run drills one after the other, in ``lab`` or in one brought up (and removed) here."""
    with ExitStack() as cleanup:
        if lab is None:
            lab = cleanup.enter_context(Lab())
        results = []
        for name in names:
            began = time.monotonic()
            try:
                result = run_drill(name, lab, short=short, template=template)
            except Exception as exc:  # noqa: BLE001 (one broken drill must not hide the rest)
                result = DrillResult(
                    name=name, title=DRILLS[name].title, short=short, did=[],
                    recovered=False, recovery_simulated_seconds=None,
                    recovery_wall_seconds=None, states={},
                    violations=[f"the drill could not run: {type(exc).__name__}: "
                                f"{_first_line(exc)}"],
                    wall_seconds=round(time.monotonic() - began, 2))
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results


def alarm_lines(result: DrillResult) -> list[str]:
    if result.alarms is None:
        return [f"  alarms: not evaluated ({result.alarms_note or 'no template'})"]
    if not result.alarms:
        return ["  alarms fired: none"]
    lines = ["  alarms fired:"]
    for a in result.alarms:
        cleared = (f", OK again at {_hm(_instant(a['cleared_at']))}" if a["cleared_at"]
                   else ", still in ALARM at the end")
        lines.append(f"    {a['alarm']} at {_hm(_instant(a['at']))} (+{a['minutes']}m){cleared}")
    return lines


def _instant(text: str) -> datetime:
    from reminders.clock import parse_instant

    return parse_instant(text, "instant")


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The report says what happened; the handlers' logs are noise (REMINDERS_DRILL_LOGS=1
    keeps them)."""
    from reminders.observability import logger

    if os.environ.get("REMINDERS_DRILL_LOGS"):
        yield
        return
    previous = logger.log_level
    logger.setLevel("CRITICAL")
    try:
        yield
    finally:
        logger.setLevel(previous)


def text(result: DrillResult, *, limit: int = 20) -> str:
    """A result as an operator reads it."""
    lines = [f"{result.name}: {result.title}" + (" (short)" if result.short else "")]
    if result.functions == "twin":
        lines.append("  functions: the template's, from their built assets, in processes of "
                     "their own (the twin)")
    elif result.did:
        lines.append(f"  functions: the handlers in this process, not on the twin: "
                     f"{result.functions_note or 'not asked'}")
    lines += [f"  - {line}" for line in result.did]
    if not result.faults:
        lines.append("  the fault never landed: this run tested nothing")
    elif result.recovered:
        lines.append(f"  recovered in {result.recovery_simulated_seconds:.0f} s of simulated "
                     f"time ({result.recovery_wall_seconds:.1f} s wall): everything due had an "
                     "outcome again")
    else:
        lines.append("  NOT recovered")
    lines.append("  deliveries: " + (", ".join(f"{k} {v}" for k, v in result.states.items())
                                     or "none"))
    lines += alarm_lines(result)
    lines.append(f"  violations: {len(result.violations)}")
    lines += [f"    {v}" for v in result.violations[:limit]]
    if len(result.violations) > limit:
        lines.append(f"    ... and {len(result.violations) - limit} more (--json lists all)")
    lines.append(f"  wall time {result.wall_seconds:.1f} s")
    return "\n".join(lines)
