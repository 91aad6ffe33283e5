"""Fixtures the integration tests share beyond the top-level ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from reminders import config
from reminders.local.stack import AWS_TEST_ENV, administrator, credentials_env
from tests.aws_principals import direct_operator, secrets_key
from tests.integration.cli_helpers import Cli, base_env


@pytest.fixture
def cli(database_url: str, tmp_path: Path, moto_endpoint: str) -> Cli:
    """The command line on the test's database, with a KMS key (in moto) for endpoint secrets,
    as an operator holding the documented operator-direct policy (no queues: it is given none)."""
    operator = credentials_env(direct_operator(moto_endpoint, None))
    return Cli({**base_env(tmp_path), "DATABASE_URL": database_url, **AWS_TEST_ENV, **operator,
                "AWS_ENDPOINT_URL": moto_endpoint,
                "REMINDERS_SECRETS_KEY_ID": secrets_key(moto_endpoint)})


@pytest.fixture
def as_lambda(moto_endpoint: str) -> dict[str, str]:
    """The credentials for ``tick`` and ``work`` on a test's moto: those commands stand in for
    EventBridge and Lambda's pollers, which act with no grant of the operator's (on the local
    stack they run each function as its role; on a test's moto, as its administrator)."""
    return credentials_env(administrator(moto_endpoint))


@pytest.fixture
def aws_cli(cli: Cli, queue_urls: config.QueueUrls, moto_endpoint: str) -> Cli:
    """The command line as :func:`cli`, given the test's queues, as an operator holding the
    documented operator-direct policy on them."""
    operator = credentials_env(direct_operator(moto_endpoint, queue_urls))
    return Cli({**cli.env, **operator, "REMINDERS_QUEUE_URL": queue_urls.deliveries,
                "REMINDERS_DLQ_URL": queue_urls.dlq,
                "REMINDERS_PARKING_QUEUE_URL": queue_urls.parking,
                "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"})
