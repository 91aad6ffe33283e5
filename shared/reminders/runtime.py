"""What every handler needs, built once per process (Lambda cold start) from the environment,
or installed by the local stack and tests (a port we own: clock, channels, metrics)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reminders import config, db
from reminders.channels.base import Channel
from reminders.clock import Clock, clock_from_env
from reminders.errors import AuthenticationFailed, ConnectionLost
from reminders.observability import Metrics, NoMetrics, logger
from reminders.queue import Publisher, Queue
from reminders.secret_box import SecretBox

T = TypeVar("T")

@dataclass
class FunctionClients:
    """The AWS clients one function runs with (see ``Runtime.functions``)."""

    deliveries: Queue
    dlq: Queue
    parking: Queue
    channels: Mapping[str, Channel]
    secret_box: SecretBox | None = None


@dataclass
class Runtime:
    settings: config.Settings
    clock: Clock
    deliveries: Queue
    dlq: Queue
    parking: Queue
    channels: Mapping[str, Channel]
    metrics: Metrics = field(default_factory=NoMetrics)
    rng: random.Random = field(default_factory=random.Random)
    # Where the database URL comes from again when a password is refused (the secret, in
    # Lambda); None when it was given whole (DATABASE_URL).
    database_url_source: Callable[[], str] | None = None
    # Opens the endpoints' sealed webhook secrets (KMS); None: no KMS client (only plaintext
    # rows not yet encrypted can be signed for).
    secret_box: SecretBox | None = None
    # Where the scanner hands its leases: a fan-out to publisher functions (reminders.fanout);
    # None: it publishes to the deliveries queue itself.
    fanout: Publisher | None = None
    # On one machine, where one runtime drives several functions: each function's own AWS
    # clients (its role's), by function name. In Lambda there is one function a process, and
    # none: the runtime's own clients are the function's.
    functions: dict[str, FunctionClients] = field(default_factory=dict)
    _conn: db.Connection | None = None
    _used: float = 0.0
    _shares: Runtime | None = None  # a function's view: whose connection it uses

    def for_function(self, name: str) -> Runtime:
        """The runtime function ``name`` runs with: this one with that function's clients if
        it has its own (the same settings, clock, metrics and database connection), else
        this one."""
        clients = self.functions.get(name)
        if clients is None:
            return self
        return replace(self, functions={}, _conn=None, _shares=self, **vars(clients))

    def connection(self) -> db.Connection:
        """A live connection. One that broke is replaced; so is one the server dropped since
        its last use, found without a round trip (:func:`db.alive`: a failover, the proxy's
        client lifetime, ``pg_terminate_backend``); one idle for longer than
        REMINDERS_DB_IDLE_CHECK_SECONDS is pinged first (RDS Proxy closes idle clients, and
        psycopg would only notice on the batch's first statement, failing the whole batch).
        A refused password is read again from its secret once (the secret rotates)."""
        if self._shares is not None:
            return self._shares.connection()
        now = time.monotonic()
        conn = self._conn
        if conn is not None and not db.alive(
                conn, ping=now - self._used > self.settings.limits.idle_check_seconds):
            conn.close()
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = self._connect()
            except AuthenticationFailed:
                if self.database_url_source is None:
                    raise
                self.settings = replace(self.settings,
                                        database_url=self.database_url_source())
                self._conn = self._connect()
        self._used = time.monotonic()
        return self._conn

    def opening(self, work: Callable[[db.Connection], T]) -> tuple[db.Connection, T]:
        """Run the opening statements of a unit of work (a batch, a tick), ones that write
        nothing or nothing a second run changes (the scanner's turn, retaken with its own
        token), on the process's connection. If the connection turns out to be gone there
        (dropped after :meth:`connection` looked at it), it is replaced once and they run
        again: nothing is replayed that could change anything twice. What follows runs on the
        connection returned; a drop once anything may have been written fails the unit as
        always, and the at-least-once machinery (redelivery, the lease's expiry) recovers."""
        conn = self.connection()
        try:
            return conn, work(conn)
        except ConnectionLost as exc:
            logger.warning("connection lost before any write; reconnecting once",
                           extra={"error": str(exc)})
            conn.close()
            conn = self.connection()
            return conn, work(conn)

    def _connect(self) -> db.Connection:
        """A new session, checked once against the settings: it must find the service's
        schema first on its ``search_path`` (the login's role settings, written by the
        migrator); timeouts other than the configured ones are logged (a pooler's server
        connections keep the ones they started with until they are renewed)."""
        conn = db.connect(self.settings.database_url, prepare=self.settings.db_prepare)
        try:
            differ = db.check_session(conn, self.session_defaults)
        except BaseException:
            conn.close()
            raise
        if differ:
            logger.warning("session defaults differ from the settings",
                           extra={"differences": differ})
        return conn

    @property
    def session_defaults(self) -> db.SessionDefaults:
        """What the service's login should start every session with (its role settings)."""
        limits = self.settings.limits
        return db.SessionDefaults(schema=self.settings.db_schema,
                                  lock_timeout_ms=limits.lock_timeout_ms,
                                  statement_timeout_ms=limits.statement_timeout_ms)

    @property
    def publisher(self) -> Publisher:
        """What the scanner publishes through: the fan-out if one is set, else the queue."""
        return self.fanout if self.fanout is not None else self.deliveries

    def close(self) -> None:
        if self._shares is not None:
            self._shares.close()
            return
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def idempotent_channels(self) -> list[str]:
        if isinstance(self.channels, LazyChannels):
            return self.channels.idempotent()
        return [name for name, ch in self.channels.items() if ch.honours_idempotency_key]


class LazyChannels(Mapping[str, Channel]):
    """Channels made on first use: the scanner and redrive never pay for clients they do not
    send with (building an SES client alone costs tens of milliseconds of a cold start)."""

    def __init__(self, makers: dict[str, tuple[bool, Callable[[], Channel]]]) -> None:
        self._makers = makers  # name -> (honours the idempotency key, factory)
        self._made: dict[str, Channel] = {}

    def __getitem__(self, name: str) -> Channel:
        if name not in self._made:
            self._made[name] = self._makers[name][1]()
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)

    def idempotent(self) -> list[str]:
        return [name for name, (keyed, _) in self._makers.items() if keyed]


def build_channels(settings: config.Settings, client: Any) -> LazyChannels:
    """``client(service, config)`` makes a boto3 client; channels get ones that never retry by
    themselves, so one send is one attempt in the ledger."""

    def webhook() -> Channel:
        from reminders.channels.addresses import parse_allow_list
        from reminders.channels.webhook import WebhookChannel

        return WebhookChannel(allow=parse_allow_list(settings.webhook_allow),
                              connect_timeout=settings.webhook_connect_timeout,
                              read_timeout=settings.webhook_read_timeout,
                              send_timeout=settings.send_timeout)

    def email() -> Channel:
        from reminders.channels.aws_errors import send_client_config
        from reminders.channels.email import SesEmailChannel

        return SesEmailChannel(client("sesv2", send_client_config()), settings.email_sender,
                               client("ses", send_client_config()))

    def sms() -> Channel:
        from reminders.channels.aws_errors import send_client_config
        from reminders.channels.sms import SnsSmsChannel

        return SnsSmsChannel(client("sns", send_client_config()))

    return LazyChannels({"webhook": (True, webhook), "email": (False, email),
                         "sms": (False, sms)})


def secret_box(settings: config.Settings, client: Callable[[str, Any], Any]) -> SecretBox:
    """The process's SecretBox; its KMS client is made on first use."""

    def kms() -> Any:
        from reminders.kms import Kms, client_config

        return Kms(client("kms", client_config()))

    return SecretBox(kms, settings.secrets_key_id)


def from_env(environ: Mapping[str, str] | None = None, *, metrics: Metrics | None = None,
             clock: Clock | None = None) -> Runtime:
    import os

    from reminders import aws

    env: Mapping[str, str] = os.environ if environ is None else dict(environ)
    settings = config.load(env)
    urls = config.require_queues(settings)

    def database_url() -> str:  # read from the secret again (it rotates)
        return config.database_url_from_env(env)

    fanout = None
    if settings.publisher_function:
        from reminders.fanout import publisher_from_settings

        fanout = publisher_from_settings(settings.publisher_function,
                                         settings.limits.publish_chunk)

    return Runtime(
        settings=settings,
        clock=clock or clock_from_env(dict(environ) if environ is not None else None),
        deliveries=Queue(aws.lean_client("sqs"), urls.deliveries),
        dlq=Queue(aws.lean_client("sqs"), urls.dlq),
        parking=Queue(aws.lean_client("sqs"), urls.parking),
        channels=build_channels(settings, aws.runtime_client),
        secret_box=secret_box(settings, aws.runtime_client),
        metrics=metrics or NoMetrics(),
        database_url_source=None if env.get("DATABASE_URL") else database_url,
        fanout=fanout,
    )


_installed: Runtime | None = None


def install(runtime: Runtime | None) -> None:
    """Set the runtime handlers use (local stack, tests); None goes back to the environment."""
    global _installed
    _installed = runtime


def at_cold_start(*, metrics_factory: Any = None) -> None:
    """In Lambda, build the runtime while the function initialises, so a missing or malformed
    setting fails the cold start with one clear error instead of the first message. Elsewhere
    (the local loop imports handlers before it installs a runtime) this does nothing."""
    import os

    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        current(metrics_factory=metrics_factory)


def current(*, metrics_factory: Any = None) -> Runtime:
    """The installed runtime, or one built from the environment on first use."""
    global _installed
    if _installed is None:
        _installed = from_env(metrics=metrics_factory() if metrics_factory else None)
    return _installed
