"""Settings, read from the environment once (at cold start) and validated there.

A missing or malformed setting raises :class:`ConfigError` naming the variable, instead of
falling back to an empty string that fails later somewhere else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from reminders.errors import ConfigError

# REMINDERS_MAX_RETRY_DELAY's range in seconds: a minute to 30 days.
MAX_RETRY_DELAY_RANGE = (60, 30 * 86_400)
# The Postgres schema that holds the service's tables and functions (REMINDERS_DB_SCHEMA): its
# own schema, so it installs into an application's database without touching the
# application's tables. A plain lower-case identifier: it goes into search_path unquoted.
DEFAULT_SCHEMA = "reminders"
# A publisher invocation's payload is about 60 bytes a message; Lambda takes at most 256 KiB
# for an asynchronous invoke, so a chunk stays well under it.
MAX_PUBLISH_CHUNK = 2000
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_CONFIG = "shared/reminders/config.py"
# Every REMINDERS_* variable the project reads, with the file that reads it. Loading the
# settings refuses any other REMINDERS_ name in the environment: a misspelt one would otherwise
# be ignored without a word and its default used. The names only tools and tests read are here
# too, since they may be set in the shell the command line runs in. tests/unit/test_setting_names.py
# checks that the source tree uses no other name and that each is read where this says.
KNOWN_VARIABLES: dict[str, str] = {
    **dict.fromkeys((
        "REMINDERS_SCAN_BATCH", "REMINDERS_INFLIGHT_BUDGET", "REMINDERS_LEASE_SECONDS",
        "REMINDERS_REDRIVE_BUDGET", "REMINDERS_WORK_ROUNDS", "REMINDERS_MAX_EMPTY_LEASES",
        "REMINDERS_DB_LOCK_TIMEOUT_MS", "REMINDERS_DB_STATEMENT_TIMEOUT_MS",
        "REMINDERS_INVOCATION_MARGIN", "REMINDERS_SEND_CONCURRENCY", "REMINDERS_MAX_RETRY_DELAY",
        "REMINDERS_SCAN_SECONDS", "REMINDERS_PUBLISH_CONCURRENCY", "REMINDERS_PUBLISH_CHUNK",
        "REMINDERS_RETENTION_BATCH", "REMINDERS_DB_IDLE_CHECK_SECONDS", "REMINDERS_FIRST_BATCH",
        "REMINDERS_DB_SCHEMA", "REMINDERS_DB_HOST", "REMINDERS_DB_SECRET_ARN",
        "REMINDERS_DB_NAME", "REMINDERS_DB_SSLMODE", "REMINDERS_DB_PORT",
        "REMINDERS_DB_SSLROOTCERT", "REMINDERS_QUEUE_URL", "REMINDERS_DLQ_URL",
        "REMINDERS_PARKING_QUEUE_URL", "REMINDERS_DB_PREPARE", "REMINDERS_WEBHOOK_ALLOW",
        "REMINDERS_EMAIL_SENDER", "REMINDERS_WEBHOOK_CONNECT_TIMEOUT",
        "REMINDERS_WEBHOOK_READ_TIMEOUT", "REMINDERS_SEND_TIMEOUT", "REMINDERS_SECRETS_KEY_ID",
        "REMINDERS_PUBLISHER_FUNCTION", "REMINDERS_REFILL_PATIENCE_SECONDS",
        "REMINDERS_MAX_THROTTLE_RETRIES", "REMINDERS_EMAIL_RATE_FROM_ACCOUNT"), _CONFIG),
    "REMINDERS_NOW": "shared/reminders/clock.py",
    "REMINDERS_CLOCK_FILE": "shared/reminders/clock.py",
    "REMINDERS_ACTOR": "shared/reminders/operator.py",
    "REMINDERS_STS_ENDPOINT": "shared/reminders/ops.py",
    "REMINDERS_OPS_SERVES": "shared/reminders/ops.py",
    "REMINDERS_DEBUG": "shared/reminders/cli/__init__.py",
    "REMINDERS_FORCE_TTY": "shared/reminders/cli_format.py",
    "REMINDERS_COMPLETE_SECONDS": "shared/reminders/cli/meta.py",
    "REMINDERS_HOME": "shared/reminders/local/stack.py",
    "REMINDERS_POSTGRES_BIN": "shared/reminders/local/postgres_binaries.py",
    "REMINDERS_DEMO_LOGS": "shared/reminders/local/demo.py",
    "REMINDERS_DRILL_LOGS": "shared/reminders/local/drills.py",
    "REMINDERS_LOCAL_FUNCTIONS": "shared/reminders/local/twin/on_stack.py",
    "REMINDERS_FUNCTION_ROLES": "shared/reminders/cli/common.py",
    "REMINDERS_BYTECODE_PYTHON": "infra/layer.py",
    "REMINDERS_TEST_DATABASE_URL": "tests/conftest.py",
    "REMINDERS_UPDATE_SCHEMA": "tests/integration/test_migrations.py",
    "REMINDERS_CHROMIUM": "tests/integration/test_console.py",
}


@dataclass(frozen=True)
class Limits:
    scan_batch: int = 100          # deliveries leased per scanner pass at most
    inflight_budget: int = 1000    # live leases + queued messages, at most
    lease_seconds: int = 300       # a lease expires this long after it is taken
    redrive_budget: int = 3        # replays from the DLQ per delivery at most (kinds may lower it)
    work_rounds: int = 10_000      # bound on local event-loop rounds
    max_empty_leases: int = 5      # received leases ending without a send before parking as dead
    lock_timeout_ms: int = 5000    # the service's sessions wait this long for a row lock at most
    statement_timeout_ms: int = 30_000  # and this long for one statement
    invocation_margin: int = 5     # seconds of an invocation kept back: no send starts inside it
    send_concurrency: int = 10     # sends of one batch in flight together
    max_retry_delay: int = 86_400  # seconds: no retry is scheduled further ahead than this
    scan_seconds: int = 30         # a scanner tick drains for this long at most
    publish_concurrency: int = 10  # SendMessageBatch calls of a tick in flight together
    publish_chunk: int = 1000      # messages per publisher invocation (fan-out) at most
    retention_batch: int = 1000    # terminal deliveries past retention removed per tick at most
    idle_check_seconds: int = 60   # a connection idle this long is checked before it is used
    first_batch: int = 100         # recurring schedules recorded through SQL expanded per tick
    # A tick whose in-flight budget is full, or that found nothing due with work falling due
    # before its end, waits for room or for that work, and ends once nothing went out for this
    # long (0: it ends at once).
    refill_patience_seconds: int = 5
    # A provider's throttles retried without spending an attempt, per delivery, at most; past
    # it a throttle counts as any transient failure (the staleness deadline bounds both).
    max_throttle_retries: int = 100


@dataclass(frozen=True)
class QueueUrls:
    deliveries: str
    dlq: str
    parking: str


@dataclass(frozen=True)
class Settings:
    database_url: str
    db_prepare: bool
    queues: QueueUrls | None
    limits: Limits
    webhook_allow: str
    email_sender: str
    webhook_connect_timeout: float = 3.0
    webhook_read_timeout: float = 10.0
    send_timeout: float = 15.0     # one wall-clock deadline per send: connect, write, whole read
    secrets_key_id: str | None = None  # the KMS key webhook secrets are sealed with
    db_schema: str = DEFAULT_SCHEMA  # the Postgres schema of the service's tables
    # The function the scanner hands chunks of leases to (fan-out); empty: it publishes itself.
    publisher_function: str = ""
    # Pace e-mail at the SES account's MaxSendRate (GetAccount, once a cold start) unless an
    # operator set a rate (`reminders channels set email --rate`).
    email_rate_from_account: bool = False


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= 120:
        raise ConfigError(f"{name} must be between 0 and 120 seconds, got {value}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "on", "yes"):
        return True
    if raw.lower() in ("0", "false", "off", "no"):
        return False
    raise ConfigError(f"{name} must be on or off, got {raw!r}")


def limits_from_env(env: Mapping[str, str]) -> Limits:
    return Limits(
        scan_batch=_int(env, "REMINDERS_SCAN_BATCH", 100, 1, 10_000),
        inflight_budget=_int(env, "REMINDERS_INFLIGHT_BUDGET", 1000, 1, 1_000_000),
        lease_seconds=_int(env, "REMINDERS_LEASE_SECONDS", 300, 5, 43_200),
        redrive_budget=_int(env, "REMINDERS_REDRIVE_BUDGET", 3, 0, 100),
        work_rounds=_int(env, "REMINDERS_WORK_ROUNDS", 10_000, 1, 10_000_000),
        max_empty_leases=_int(env, "REMINDERS_MAX_EMPTY_LEASES", 5, 2, 1000),
        lock_timeout_ms=_int(env, "REMINDERS_DB_LOCK_TIMEOUT_MS", 5000, 1, 600_000),
        statement_timeout_ms=_int(env, "REMINDERS_DB_STATEMENT_TIMEOUT_MS", 30_000, 100,
                                  3_600_000),
        invocation_margin=_int(env, "REMINDERS_INVOCATION_MARGIN", 5, 0, 600),
        send_concurrency=_int(env, "REMINDERS_SEND_CONCURRENCY", 10, 1, 500),
        max_retry_delay=_int(env, "REMINDERS_MAX_RETRY_DELAY", 86_400, *MAX_RETRY_DELAY_RANGE),
        scan_seconds=_int(env, "REMINDERS_SCAN_SECONDS", 30, 1, 840),
        publish_concurrency=_int(env, "REMINDERS_PUBLISH_CONCURRENCY", 10, 1, 64),
        publish_chunk=_int(env, "REMINDERS_PUBLISH_CHUNK", 1000, 1, MAX_PUBLISH_CHUNK),
        retention_batch=_int(env, "REMINDERS_RETENTION_BATCH", 1000, 0, 100_000),
        idle_check_seconds=_int(env, "REMINDERS_DB_IDLE_CHECK_SECONDS", 60, 0, 86_400),
        first_batch=_int(env, "REMINDERS_FIRST_BATCH", 100, 1, 10_000),
        refill_patience_seconds=_int(env, "REMINDERS_REFILL_PATIENCE_SECONDS", 5, 0, 60),
        max_throttle_retries=_int(env, "REMINDERS_MAX_THROTTLE_RETRIES", 100, 0, 10_000),
    )


def schema_from_env(env: Mapping[str, str]) -> str:
    """REMINDERS_DB_SCHEMA: where the service's tables live (default ``reminders``)."""
    raw = env.get("REMINDERS_DB_SCHEMA")
    if raw is None or raw == "":
        return DEFAULT_SCHEMA
    return check_schema(raw)


def check_schema(name: str) -> str:
    if not _SCHEMA_NAME.match(name) or name.startswith("pg_"):
        raise ConfigError("REMINDERS_DB_SCHEMA must be a lower-case identifier (a-z, 0-9, _; "
                          f"at most 63, not starting with a digit or pg_), got {name!r}")
    return name


def database_url_from_env(env: Mapping[str, str]) -> str:
    """``DATABASE_URL`` wins; otherwise host + name + a Secrets Manager secret (in Lambda)."""
    url = env.get("DATABASE_URL")
    if url:
        return url
    host = env.get("REMINDERS_DB_HOST")
    secret_arn = env.get("REMINDERS_DB_SECRET_ARN")
    if not host or not secret_arn:
        raise ConfigError(
            "no database configured: set DATABASE_URL, or REMINDERS_DB_HOST with "
            "REMINDERS_DB_SECRET_ARN (run `reminders local up` for a local one)"
        )
    from reminders.aws import read_db_secret  # only in Lambda: keeps local imports lean

    user, password = read_db_secret(secret_arn)
    name = env.get("REMINDERS_DB_NAME", "reminders")
    sslmode = env.get("REMINDERS_DB_SSLMODE", "verify-full")
    extra = f"&sslrootcert={quote(ca_bundle(env), safe='/')}" if sslmode == "verify-full" else ""
    port = _int(env, "REMINDERS_DB_PORT", 5432, 1, 65_535)
    # The host is percent-encoded, so a Unix socket directory works as well as a name.
    return (f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}"
            f"@{quote(host, safe='')}:{port}/{quote(name, safe='')}?sslmode={sslmode}{extra}")


# Where Lambda's Amazon Linux image (and most Linux hosts) keep the trusted CAs, which include
# the Amazon roots RDS Proxy's certificates chain to. libpq bundled in psycopg's wheel has its
# own idea of OpenSSL's default paths, so the file is named explicitly.
CA_BUNDLES = ("/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt")


def ca_bundle(env: Mapping[str, str]) -> str:
    """The CA bundle that verifies the proxy's certificate; missing, start-up fails here rather
    than every connection later (libpq's "system" needs OpenSSL paths the wheel may not have)."""
    explicit = env.get("REMINDERS_DB_SSLROOTCERT")
    if explicit:
        return explicit
    found = next((path for path in CA_BUNDLES if os.path.exists(path)), None)
    if found is None:
        raise ConfigError(f"no CA bundle to verify the database's certificate: none of "
                          f"{', '.join(CA_BUNDLES)} exists; set REMINDERS_DB_SSLROOTCERT")
    return found


def queues_from_env(env: Mapping[str, str]) -> QueueUrls | None:
    names = ("REMINDERS_QUEUE_URL", "REMINDERS_DLQ_URL", "REMINDERS_PARKING_QUEUE_URL")
    values = [env.get(n, "") for n in names]
    if not any(values):
        return None
    missing = [n for n, v in zip(names, values, strict=True) if not v]
    if missing:
        raise ConfigError(f"queue settings incomplete: {', '.join(missing)} not set")
    return QueueUrls(*values)


def check_names(env: Mapping[str, str]) -> None:
    """:class:`ConfigError` naming every ``REMINDERS_`` variable in ``env`` that is not one of
    :data:`KNOWN_VARIABLES`, each with the known name closest to it."""
    unknown = sorted(name for name in env
                     if name.startswith("REMINDERS_") and name not in KNOWN_VARIABLES)
    if not unknown:
        return
    import difflib

    named = ", ".join(
        f"{name} (did you mean {difflib.get_close_matches(name, KNOWN_VARIABLES, 1, 0)[0]}?)"
        for name in unknown)
    raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''}: {named}; "
                      "docs/settings.md lists the REMINDERS_ variables")


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``environ`` (the process's environment by default), every one checked;
    an unknown ``REMINDERS_`` variable is an error too (see :func:`check_names`)."""
    env = os.environ if environ is None else environ
    check_names(env)
    return Settings(
        database_url=database_url_from_env(env),
        db_prepare=_bool(env, "REMINDERS_DB_PREPARE", False),
        queues=queues_from_env(env),
        limits=limits_from_env(env),
        webhook_allow=env.get("REMINDERS_WEBHOOK_ALLOW", ""),
        email_sender=env.get("REMINDERS_EMAIL_SENDER", "reminders@example.com"),
        webhook_connect_timeout=_float(env, "REMINDERS_WEBHOOK_CONNECT_TIMEOUT", 3.0),
        webhook_read_timeout=_float(env, "REMINDERS_WEBHOOK_READ_TIMEOUT", 10.0),
        send_timeout=_float(env, "REMINDERS_SEND_TIMEOUT", 15.0),
        secrets_key_id=env.get("REMINDERS_SECRETS_KEY_ID") or None,
        db_schema=schema_from_env(env),
        publisher_function=env.get("REMINDERS_PUBLISHER_FUNCTION", ""),
        email_rate_from_account=_bool(env, "REMINDERS_EMAIL_RATE_FROM_ACCOUNT", False),
    )


def require_queues(settings: Settings) -> QueueUrls:
    if settings.queues is None:
        raise ConfigError(
            "no queues configured: set REMINDERS_QUEUE_URL, REMINDERS_DLQ_URL and "
            "REMINDERS_PARKING_QUEUE_URL (run `reminders local up` for local ones)"
        )
    return settings.queues
