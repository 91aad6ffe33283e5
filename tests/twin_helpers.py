"""A service function of the template on the twin, against a moto server, queues and a pooled
database: what the twin's tests and the cold-start benchmark run (the integration into
`reminders local up` comes with the twin's queues and event source mappings)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from reminders import config
from reminders.aws_http import Credentials
from reminders.local import stack
from reminders.local.moto_server import ACCOUNT
from reminders.local.twin.assets import FunctionAssets
from reminders.local.twin.functions import function_specs
from reminders.local.twin.instances import FunctionPool, lambda_environment
from reminders.local.twin.references import REF, LocalValues, queue_values, values_by_name


def database_secret(endpoint: str, database_url: str) -> str:
    """A secret in the moto server at ``endpoint`` holding ``database_url``'s login, as the
    application role's secret holds it in AWS; its ARN."""
    login = conninfo_to_dict(database_url)
    arn: str = stack.aws_client("secretsmanager", endpoint).create_secret(
        Name=f"twin-app-{uuid.uuid4().hex[:8]}", SecretString=json.dumps(
            {"username": login.get("user") or "postgres",
             "password": login.get("password") or ""}))["ARN"]
    return arn


def stack_values(template: Any, urls: config.QueueUrls, database_url: str,
                 secret_arn: str) -> LocalValues:
    """The local stand-ins for what the service functions' settings name."""
    host = str(conninfo_to_dict(database_url)["host"])
    return LocalValues(stack.REGION, ACCOUNT, values_by_name(template, {
        "deliveries": queue_values(urls.deliveries, stack.REGION, ACCOUNT),
        "dlq": queue_values(urls.dlq, stack.REGION, ACCOUNT),
        "parking": queue_values(urls.parking, stack.REGION, ACCOUNT),
        "proxy": {"Endpoint": host},
        "app_secret": {REF: secret_arn}}))


def local_settings(endpoint: str, database_url: str, now: str | None = None) -> dict[str, str]:
    """What differs on one machine from the template's settings: moto's endpoint, the
    pooler's port and the database's name, no TLS (the pooler has none); the injected clock;
    a tick that does not wait for consumers to make room (none run beside it here)."""
    login = conninfo_to_dict(database_url)
    return {"AWS_ENDPOINT_URL": endpoint, "REMINDERS_DB_PORT": str(login["port"]),
            "REMINDERS_DB_NAME": str(login["dbname"]), "REMINDERS_DB_SSLMODE": "disable",
            "REMINDERS_REFILL_PATIENCE_SECONDS": "0",
            **({"REMINDERS_NOW": now} if now else {})}


def twin_pool(template: Any, name: str, assets: FunctionAssets, *, endpoint: str,
              urls: config.QueueUrls, database_url: str, secret_arn: str,
              credentials: Credentials, log_dir: Path, now: str | None = None,
              **kwargs: Any) -> FunctionPool:
    """A pool of function ``name`` of ``template``, as its role (``credentials``)."""
    local = stack_values(template, urls, database_url, secret_arn)
    spec = function_specs(template, local, only=(name,))[name]
    env = lambda_environment(spec, assets, region=stack.REGION, credentials=credentials,
                             extra=local_settings(endpoint, database_url, now))
    assert "DATABASE_URL" not in env  # the URL is built from the proxy host and the secret
    return FunctionPool(spec, assets, env, log_dir, stack.REGION, ACCOUNT, **kwargs)


def scheduled_event(at: str) -> dict[str, Any]:
    """What the rate(1 minute) rule sends the scanner."""
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event",
            "source": "aws.events", "account": ACCOUNT, "time": at, "region": stack.REGION,
            "resources": [f"arn:aws:events:{stack.REGION}:{ACCOUNT}:rule/Reminders-tick"],
            "detail": {}}
