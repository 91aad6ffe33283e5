"""In Lambda the database URL is built from the proxy host and the Secrets Manager secret."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from reminders import aws, config
from reminders.errors import ConfigError
from reminders.local import stack
from tests.aws_principals import make_roles


@pytest.fixture
def secrets_endpoint(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    aws.client.cache_clear()
    yield moto_endpoint
    aws.client.cache_clear()


@pytest.fixture
def as_scanner(secrets_endpoint: str, queue_urls: config.QueueUrls,
               monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Run as Lambda runs the scanner: its role's credentials in the environment, the role
    granted the template's read of the application's secret (the ARN given)."""

    def become(secret_arn: str) -> None:
        role = make_roles(secrets_endpoint, queue_urls, ("scanner",),
                          app_secret=secret_arn)["scanner"]
        for variable, value in stack.credentials_env(role.credentials).items():
            monkeypatch.setenv(variable, value)

    return become


def test_url_from_proxy_host_and_secret_verifies_tls(
        secrets_endpoint: str, as_scanner: Callable[[str], None]) -> None:
    sm = stack.aws_client("secretsmanager", secrets_endpoint)
    arn = sm.create_secret(Name="db-creds-ok", SecretString=json.dumps(
        {"username": "app user", "password": "p@ss/word:1"}))["ARN"]
    as_scanner(arn)
    url = config.database_url_from_env({
        "REMINDERS_DB_HOST": "proxy.example.internal", "REMINDERS_DB_SECRET_ARN": arn,
        "REMINDERS_DB_NAME": "reminders", "REMINDERS_DB_SSLROOTCERT": "/opt/ca/bundle.pem"})
    assert url == ("postgresql://app%20user:p%40ss%2Fword%3A1@proxy.example.internal:5432/"
                   "reminders?sslmode=verify-full&sslrootcert=/opt/ca/bundle.pem")


def test_a_secret_without_credentials_is_a_clear_error(
        secrets_endpoint: str, as_scanner: Callable[[str], None]) -> None:
    sm = stack.aws_client("secretsmanager", secrets_endpoint)
    arn = sm.create_secret(Name="db-creds-bad", SecretString="not json")["ARN"]
    as_scanner(arn)
    with pytest.raises(ConfigError, match="lacks username/password"):
        config.database_url_from_env({"REMINDERS_DB_HOST": "h",
                                      "REMINDERS_DB_SECRET_ARN": arn})


def test_no_database_setting_names_what_to_set() -> None:
    with pytest.raises(ConfigError, match="set DATABASE_URL, or REMINDERS_DB_HOST"):
        config.database_url_from_env({"REMINDERS_DB_HOST": "only-host"})


def test_a_missing_ca_bundle_fails_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "CA_BUNDLES", ("/nonexistent/ca-bundle.crt",))
    with pytest.raises(ConfigError, match="set REMINDERS_DB_SSLROOTCERT"):
        config.ca_bundle({})
