"""Where AWS clients come from, and the database secret. ``AWS_ENDPOINT_URL`` points every
client at moto's server on one machine.

:func:`lean_client` is what the Lambda functions call through on their hot path (SQS, Secrets
Manager, KMS, Lambda Invoke): SigV4-signed HTTPS from ``reminders.aws_http``, with no boto3
import, whenever the environment holds credentials (Lambda always puts them there), else a
boto3 client with the same limits. :func:`client` is boto3, for everything else (the command
line, CloudFormation, STS)."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from reminders.aws_http import SERVICES, Limits, env_credentials
from reminders.errors import ConfigError

# Three attempts, short connects, and connections enough for the scanner's and the
# publishers' parallel SendMessageBatch calls.
DEFAULT_LIMITS = Limits(attempts=3, connect_timeout=3, read_timeout=10, pool=64)


@cache
def client(service: str) -> Any:
    import boto3

    return boto3.client(service, region_name=region_name(),  # type: ignore[call-overload]
                        config=boto_config(DEFAULT_LIMITS))


def region_name() -> str | None:
    """``AWS_DEFAULT_REGION`` or the profile's region, as botocore reads them, else
    ``AWS_REGION`` (which the other SDKs and Lambda set, and botocore does not read)."""
    import boto3

    return boto3.session.Session().region_name or os.environ.get("AWS_REGION") or None


def region() -> str:
    """The region the command line's boto3 clients use, so STS is the stack's region's; none
    set is bad input (exit status 2), never "unreachable"."""
    name = region_name()
    if not name:
        raise ConfigError("no AWS region: set AWS_REGION or AWS_DEFAULT_REGION, or a region "
                          "in AWS_PROFILE's configuration")
    return str(name)


def sts_client(region_name: str) -> Any:
    """STS at ``region_name``'s own endpoint (``sts.REGION.amazonaws.com``, or the FIPS or
    dual-stack host where AWS_USE_FIPS_ENDPOINT or AWS_USE_DUALSTACK_ENDPOINT asks), never the
    global ``sts.amazonaws.com`` that botocore before 1.36 picks for the older regions
    (``sts_regional_endpoints = legacy``, which a profile may still set). An endpoint set for
    STS (``AWS_ENDPOINT_URL_STS``, ``AWS_ENDPOINT_URL``) is used as it is."""
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    core.set_config_variable("sts_regional_endpoints", "regional")
    return boto3.Session(botocore_session=core, region_name=region_name).client(
        "sts", config=boto_config(DEFAULT_LIMITS))


def send_client(service: str, config: Any) -> Any:
    """A client for a channel's sends, with the channel's own (no-retry) configuration."""
    import boto3

    return boto3.client(service, region_name=region_name(),  # type: ignore[call-overload]
                        config=config)


def runtime_client(service: str, config: Any = None) -> Any:
    """What the runtime makes its clients with: ``config`` is :class:`Limits` (or None) for
    the services :func:`lean_client` serves, or a botocore ``Config`` (the channels' sends)."""
    if config is None or isinstance(config, Limits):
        return lean_client(service, config or DEFAULT_LIMITS)
    return send_client(service, config)


def boto_config(limits: Limits) -> Any:
    from botocore.config import Config

    return Config(retries={"max_attempts": limits.attempts, "mode": "standard"},
                  connect_timeout=limits.connect_timeout, read_timeout=limits.read_timeout,
                  max_pool_connections=limits.pool)


@cache
def lean_client(service: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """A client for SQS, Secrets Manager, KMS or Lambda's Invoke, without boto3 when the
    environment holds credentials; made once per process and limits."""
    if service in SERVICES and env_credentials() is not None:
        from reminders import aws_http

        return aws_http.client(service, limits)
    return send_client(service, boto_config(limits))


def read_db_secret(secret_arn: str) -> tuple[str, str]:
    value = lean_client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"]
    try:
        data = json.loads(value)
        return str(data["username"]), str(data["password"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"secret {secret_arn} lacks username/password JSON") from None
