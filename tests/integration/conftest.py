"""Fixtures the integration tests share beyond the top-level ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from reminders import config
from reminders.local.stack import AWS_TEST_ENV, administrator, credentials_env
from tests.aws_principals import secrets_key
from tests.integration.cli_helpers import Cli, base_env


@pytest.fixture
def cli(database_url: str, tmp_path: Path, moto_endpoint: str) -> Cli:
    """The command line on the test's database, with a KMS key (in moto) for endpoint secrets."""
    # As the administrator: the command line's own principal (the documented operator policy)
    # is not made in moto yet.
    admin = credentials_env(administrator(moto_endpoint))
    return Cli({**base_env(tmp_path), "DATABASE_URL": database_url, **AWS_TEST_ENV, **admin,
                "AWS_ENDPOINT_URL": moto_endpoint,
                "REMINDERS_SECRETS_KEY_ID": secrets_key(moto_endpoint)})


@pytest.fixture
def aws_cli(cli: Cli, queue_urls: config.QueueUrls, moto_endpoint: str) -> Cli:
    return Cli({**cli.env, "REMINDERS_QUEUE_URL": queue_urls.deliveries,
                "REMINDERS_DLQ_URL": queue_urls.dlq,
                "REMINDERS_PARKING_QUEUE_URL": queue_urls.parking,
                "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"})
