"""boto3 client construction and the database secret. ``AWS_ENDPOINT_URL`` (honoured by boto3
itself) points every client at moto's server on one machine."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from reminders.errors import ConfigError


@cache
def client(service: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(service, config=Config(  # type: ignore[call-overload]
        retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=3, read_timeout=10,
        max_pool_connections=64))  # the scanner's parallel SendMessageBatch calls


def send_client(service: str, config: Any) -> Any:
    """A client for a channel's sends, with the channel's own (no-retry) configuration."""
    import boto3

    return boto3.client(service, config=config)  # type: ignore[call-overload]


def read_db_secret(secret_arn: str) -> tuple[str, str]:
    value = client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"]
    try:
        data = json.loads(value)
        return str(data["username"]), str(data["password"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"secret {secret_arn} lacks username/password JSON") from None
