"""Real parts: one embedded Postgres per session with a migrated template database cloned for
each test, one moto server over HTTP with fresh queues per test, and a real webhook receiver."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from reminders import config, db
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock
from reminders.db import migrate
from reminders.local import pooler, stack
from reminders.queue import Queue
from reminders.runtime import FunctionClients, Runtime
from tests.aws_principals import OPERATOR_ARN, function_roles, operator, secrets_key

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)

# CI replays the same examples every run (a landing must not hinge on a lucky draw); a
# developer's runs keep exploring new ones.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis.settings.load_profile("ci")
_counter = itertools.count()


@dataclass(frozen=True)
class PgCluster:
    """The session's Postgres: ``direct`` reaches the server itself (creating and migrating
    databases), ``pooler`` is the PgBouncer every client goes through, as the deployed
    functions go through RDS Proxy (see reminders.local.pooler)."""

    direct: str
    pooler: pooler.Pooler | None

    def pooled(self, direct_url: str) -> str:
        return direct_url if self.pooler is None else self.pooler.url(direct_url)

    def configure(self, database_url: str, defaults: db.SessionDefaults,
                  role: str | None = None) -> None:
        """Write ``defaults`` as the login's role settings in the database ``database_url``
        names (on the server itself), and have the pooler renew its server connections so
        the sessions from now on start with them."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        name = str(conninfo_to_dict(database_url)["dbname"])
        with db.connect(make_conninfo(self.direct, dbname=name)) as conn:
            db.configure_login(conn, defaults, role)
        if self.pooler is not None:
            self.pooler.reconnect(self.direct, name)

    def new_database(self, name: str, template: str | None = "reminders_template") -> str:
        """A database of its own (cloned from ``template``), as clients reach it: through the
        pooler. Its role settings (search_path, timeouts) are written on the server itself
        first: they are kept per database, and a server connection reads them when it
        starts, so one the pooler opened before them would keep the server's defaults."""
        direct = db.create_database(self.direct, name, template=template)
        with db.connect(direct) as conn:
            migrate.apply(conn)
        return self.pooled(direct)


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgCluster]:
    """``REMINDERS_TEST_DATABASE_URL`` names a server to use as it is (with whatever pooler
    it has in front); otherwise an embedded Postgres behind a PgBouncer of its own."""
    url = os.environ.get("REMINDERS_TEST_DATABASE_URL")
    home: Path | None = None
    bouncer: pooler.Pooler | None = None
    if not url:
        # Not under pytest's tmp dirs: a concurrent pytest run may prune those while we run.
        home = Path(tempfile.mkdtemp(prefix="reminders-pg-"))
        # Stopped below, not at exit: the library's own stop at exit would find the data
        # directory gone (it is removed in the background) and say it failed.
        url = stack.start_postgres(home / "data", keep_running=True)
        bouncer = pooler.start(url, home / "pooler", stack.free_port())
    if home is not None:
        # A test server's data is thrown away with it: nothing it writes must outlive a crash
        # of the machine, so its writes are not flushed to disk (a crash of Postgres itself,
        # as the restart drill makes, loses nothing by this).
        with db.connect(url) as conn:  # autocommit: ALTER SYSTEM runs outside a transaction
            conn.execute("alter system set fsync = off")
            conn.execute("select pg_reload_conf()")
    template_url = db.create_database(url, "reminders_template")
    with db.connect(template_url) as conn:
        migrate.apply(conn)
    try:
        yield PgCluster(direct=url, pooler=bouncer)
    finally:
        if bouncer is not None:
            bouncer.stop()
        if home is not None:  # every test database goes with the server: gigabytes a session
            stack.stop_postgres(home / "data")
            # A worker's databases come to gigabytes (about 12 MB each, a test each), and
            # removing them took 35 s at the end of a run: they go in a process of their own
            # that the run does not wait for.
            subprocess.Popen(["rm", "-rf", "--", str(home)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def pg_server(pg_cluster: PgCluster) -> str:
    """The server as clients reach it: through the pooler."""
    return pg_cluster.pooled(pg_cluster.direct)


@pytest.fixture
def database_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A database of its own, cloned from the migrated template, as clients reach it (through
    the pooler). Afterwards the pooler closes its server connections: idle ones would
    otherwise stay for server_idle_timeout, and a run of quick tests (two or three pools
    each) fills the server's max_connections with them."""
    name = f"t_{os.getpid()}_{next(_counter)}"
    yield pg_cluster.new_database(name)
    if pg_cluster.pooler is not None:
        pg_cluster.pooler.reconnect(pg_cluster.direct, name)


@pytest.fixture
def conn(database_url: str) -> Iterator[db.Connection]:
    with db.connect(database_url) as connection:
        yield connection


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto in server mode, in its own process (as `reminders local up` runs it), with its
    access control on: set-up runs as its administrator, each function as its role."""
    for key, value in stack.AWS_TEST_ENV.items():
        os.environ.setdefault(key, value)
    port = stack.free_port()
    credentials = tmp_path_factory.mktemp("moto") / "administrator.json"
    server = stack.start_moto(port, credentials)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        stack.wait_moto(endpoint, credentials)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="session")
def sts_endpoint(moto_endpoint: str) -> Iterator[str]:
    """The SigV4-verifying STS stand-in, in its own process, knowing the operator's key (an
    IAM user in moto, tests.aws_principals.operator) as OPERATOR_ARN: what decides whether an
    identity proof is good (moto's STS checks nothing)."""
    key = operator(moto_endpoint)
    port = stack.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "reminders.local.sts_server", "--port", str(port),
         "--region", stack.REGION, "--principal", key.access_key, key.secret_key,
         OPERATOR_ARN],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        stack.wait_http(f"{endpoint}/_stand-in/health")
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(autouse=True)
def refusals_fail_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A call moto refused (AccessDenied, a bad signature, an unknown key) fails the test that
    made it, however the code handled the error (the scanner releases what it could not
    publish, a channel records a failed send): only a test marked ``refusals_expected``
    provokes them on purpose."""
    if "moto_endpoint" not in request.fixturenames:
        yield
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    if not stack.enforces_access(endpoint):  # a module's own in-process moto (no decisions)
        yield
        return
    seen = stack.decision_count(endpoint)
    yield
    refused = [d for d in stack.decisions(endpoint, since=seen) if d["outcome"] != "allowed"]
    if request.node.get_closest_marker("refusals_expected") is None:
        assert not refused, f"moto refused calls the code made: {refused}"


@pytest.fixture
def queue_urls(moto_endpoint: str) -> config.QueueUrls:
    return stack.prepare_aws(moto_endpoint, prefix=f"t{next(_counter)}",
                             visibility_timeout_override=1, max_receive_count_override=2)


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A real receiver. After every test: at most one effect per delivery key, and no key
    answered 2xx twice unless the test says it provokes a resend (send-then-crash)."""
    from reminders.local.receiver import WebhookReceiver

    rcv = WebhookReceiver(secret=new_secret())
    rcv.start()
    yield rcv
    stats = rcv.stats()
    rcv.stop()
    assert all(n <= 1 for n in stats["effects"].values()), stats["effects"]
    if request.node.get_closest_marker("resends_allowed") is None:
        assert stats["duplicates"] == 0, stats["ok_answers"]


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@dataclass
class Harness:
    """A test's whole pipeline: runtime, the app connection, the receiver, the clock."""

    rt: Runtime
    conn: db.Connection
    receiver: Any
    clock: FixedClock
    endpoint: str

    def sqs(self) -> Any:
        return stack.aws_client("sqs", self.endpoint)


def make_runtime(database_url: str, urls: config.QueueUrls, endpoint: str, clock: FixedClock,
                 **limits: int) -> Runtime:
    """The tests' runtime. Its own clients are the test's hands (the administrator: set-up
    and inspection); scanner, consumer, redrive and ops each run with a view of it whose
    clients carry that function's role (``Runtime.for_function``)."""
    from reminders.runtime import build_channels, secret_box

    env = {"DATABASE_URL": database_url, "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32",
           "REMINDERS_EMAIL_SENDER": stack.SENDER, "REMINDERS_WEBHOOK_READ_TIMEOUT": "2",
           "REMINDERS_SECRETS_KEY_ID": secrets_key(endpoint)}
    # A tick called here runs alone (the tests run the consumers after it): waiting for them to
    # make room would only stall it. The tests of that wait set it.
    env["REMINDERS_REFILL_PATIENCE_SECONDS"] = "0"
    env.update({f"REMINDERS_{k.upper()}": str(v) for k, v in limits.items()})
    settings = config.load(env)

    def clients(credentials: Any = None) -> dict[str, Any]:
        def client(service: str, client_config: Any = None) -> Any:
            return stack.service_client(service, endpoint, client_config,
                                        credentials=credentials)

        sqs = client("sqs")
        return {"deliveries": Queue(sqs, urls.deliveries), "dlq": Queue(sqs, urls.dlq),
                "parking": Queue(sqs, urls.parking),
                "channels": build_channels(settings, client),
                "secret_box": secret_box(settings, client)}

    rt = Runtime(settings=settings, clock=clock, rng=random.Random(7), **clients())
    rt.functions = {name: FunctionClients(**clients(role.credentials))
                    for name, role in function_roles(endpoint, urls).items()}
    return rt


@pytest.fixture
def harness(database_url: str, conn: db.Connection, queue_urls: config.QueueUrls,
            moto_endpoint: str, receiver: Any, clock: FixedClock) -> Iterator[Harness]:
    rt = make_runtime(database_url, queue_urls, moto_endpoint, clock)
    h = Harness(rt, conn, receiver, clock, moto_endpoint)
    yield h
    rt.close()
    h.rt.close()  # a test may have put a runtime with other limits in its place


# The modules whose tests take longest, longest first (pytest --durations, summed per module,
# 2026-12-03: 212 s down to 30 s of a 1,419 s run). They run first: xdist hands tests to its
# workers in order, so a long one left to the end keeps one worker busy while the other has
# nothing left to take (the run took 14 min 49 s for 11 min 50 s of work a worker).
RUN_FIRST = ("test_drills.py", "test_demo.py", "test_pacing.py", "test_interleavings.py",
             "test_readme_walkthrough.py", "test_series.py", "test_twin_run.py",
             "test_twin_async.py", "test_ops_function.py", "test_cli_operator.py",
             "test_console_live.py", "test_local_stack.py", "test_console_schedules.py",
             "test_console_settings.py", "test_console_browse.py", "test_bounded_tick.py",
             "test_console.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent.name == "integration":
            item.add_marker(pytest.mark.integration)
    rank = {name: n for n, name in enumerate(RUN_FIRST)}
    # A stable sort: each module's tests stay together and in their order.
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(RUN_FIRST)))
