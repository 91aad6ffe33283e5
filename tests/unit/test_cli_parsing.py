"""Parsing that rejects bad input with a message naming it: durations, queue bodies, settings."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from uuid import UUID

import pytest

from reminders import config
from reminders.cli import parse_duration
from reminders.errors import ConfigError, InvalidInput
from reminders.queue import LeaseMessage, parse_body

TOKEN = "5f0c7a52-3a8e-4d55-9c7e-3c3b1c0f1a2b"

# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("3h", timedelta(hours=3)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("  3H ", timedelta(hours=3)),
        ("0s", timedelta(0)),
        ("PT3H", timedelta(hours=3)),
        ("pt45m", timedelta(minutes=45)),
        ("PT90S", timedelta(seconds=90)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("P2D", timedelta(days=2)),
        ("P1DT2H3M4S", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text, "--stale-after") == expected


@pytest.mark.parametrize("text", ["none", "None", "NEVER", "off"])
def test_parse_duration_none_means_no_limit(text: str) -> None:
    assert parse_duration(text, "--stale-after") is None


@pytest.mark.parametrize(
    "text",
    [
        "soon",
        "",
        "   ",
        "3",
        "3x",
        "-5m",
        "1.5h",
        "3h soon",
        "h",
        "P",
        "PT",
        "P1Y",
        "3 hours",
    ],
)
def test_parse_duration_rejects_garbage_naming_the_flag_and_the_text(text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_duration(text, "--backoff-cap")
    assert str(err.value) == (
        f"--backoff-cap: not a duration: {text!r} (try 90s, 15m, 3h, 2d or PT3H)"
    )


@pytest.mark.parametrize(
    "text", ["9999999999d", "P9999999999D", "PT99999999999H", "100000000000000000000s"]
)
def test_parse_duration_out_of_range_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_duration(text, "--stale-after")
    assert str(err.value).startswith("--stale-after: ")
    assert repr(text) in str(err.value)


# ---------------------------------------------------------------- queue message bodies


def test_parse_body_valid() -> None:
    got = parse_body(json.dumps({"delivery_id": 42, "lease_token": TOKEN}))
    assert got == LeaseMessage(42, UUID(TOKEN))


def test_parse_body_round_trips_what_the_scanner_publishes() -> None:
    message = LeaseMessage(7, UUID(TOKEN))
    assert message.body() == f'{{"delivery_id":7,"lease_token":"{TOKEN}"}}'
    assert parse_body(message.body()) == message


def test_parse_body_ignores_extra_fields() -> None:
    body = json.dumps({"delivery_id": 3, "lease_token": TOKEN, "state": "sent"})
    assert parse_body(body) == LeaseMessage(3, UUID(TOKEN))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "body is not JSON: 'not json'"),
        ("", "body is not JSON: ''"),
        ('{"delivery_id": 1', "body is not JSON: '{\"delivery_id\": 1'"),
        ("[1, 2]", "body must be a JSON object, got list"),
        ('"x"', "body must be a JSON object, got str"),
        ("null", "body must be a JSON object, got NoneType"),
        (json.dumps({"lease_token": TOKEN}), "delivery_id must be a positive integer, got None"),
        (
            json.dumps({"delivery_id": -3, "lease_token": TOKEN}),
            "delivery_id must be a positive integer, got -3",
        ),
        (
            json.dumps({"delivery_id": 0, "lease_token": TOKEN}),
            "delivery_id must be a positive integer, got 0",
        ),
        (
            json.dumps({"delivery_id": True, "lease_token": TOKEN}),
            "delivery_id must be a positive integer, got True",
        ),
        (
            json.dumps({"delivery_id": "5", "lease_token": TOKEN}),
            "delivery_id must be a positive integer, got '5'",
        ),
        (
            json.dumps({"delivery_id": 5.0, "lease_token": TOKEN}),
            "delivery_id must be a positive integer, got 5.0",
        ),
        (json.dumps({"delivery_id": 5}), "lease_token must be a UUID string, got None"),
        (
            json.dumps({"delivery_id": 5, "lease_token": 12}),
            "lease_token must be a UUID string, got 12",
        ),
        (
            json.dumps({"delivery_id": 5, "lease_token": "nope"}),
            "lease_token is not a UUID: 'nope'",
        ),
        (
            json.dumps({"delivery_id": 5, "lease_token": TOKEN[:-1]}),
            f"lease_token is not a UUID: {TOKEN[:-1]!r}",
        ),
    ],
)
def test_parse_body_rejects_naming_the_field(body: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_body(body)
    assert str(err.value) == message


def test_parse_body_quotes_at_most_80_characters_of_garbage() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_body("x" * 500)
    assert str(err.value) == f"body is not JSON: {'x' * 80!r}"


# ---------------------------------------------------------------- settings

BASE_ENV = {"DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/reminders"}
QUEUES = {
    "REMINDERS_QUEUE_URL": "http://q/deliveries",
    "REMINDERS_DLQ_URL": "http://q/dlq",
    "REMINDERS_PARKING_QUEUE_URL": "http://q/parking",
}


def test_config_defaults() -> None:
    settings = config.load(dict(BASE_ENV))
    assert settings == config.Settings(
        database_url=BASE_ENV["DATABASE_URL"],
        db_prepare=False,  # behind RDS Proxy (and the local PgBouncer) they pin or break
        queues=None,
        limits=config.Limits(),
        webhook_allow="",
        email_sender="reminders@example.com",
        webhook_connect_timeout=3.0,
        webhook_read_timeout=10.0,
        send_timeout=15.0,
    )
    assert config.Limits() == config.Limits(
        scan_batch=100,
        inflight_budget=1000,
        lease_seconds=300,
        redrive_budget=3,
        work_rounds=10_000,
        max_retry_delay=86_400,
    )


def test_config_reads_every_setting() -> None:
    env = {
        **BASE_ENV,
        **QUEUES,
        "REMINDERS_DB_PREPARE": "off",
        "REMINDERS_SCAN_BATCH": "7",
        "REMINDERS_INFLIGHT_BUDGET": "70",
        "REMINDERS_LEASE_SECONDS": "60",
        "REMINDERS_REDRIVE_BUDGET": "0",
        "REMINDERS_WORK_ROUNDS": "5",
        "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32",
        "REMINDERS_EMAIL_SENDER": "a@b.example",
        "REMINDERS_WEBHOOK_CONNECT_TIMEOUT": "1.5",
        "REMINDERS_WEBHOOK_READ_TIMEOUT": "2",
        "REMINDERS_SEND_TIMEOUT": "4.5",
        "REMINDERS_MAX_RETRY_DELAY": "3600",
    }
    settings = config.load(env)
    assert settings == config.Settings(
        database_url=BASE_ENV["DATABASE_URL"],
        db_prepare=False,
        queues=config.QueueUrls("http://q/deliveries", "http://q/dlq", "http://q/parking"),
        limits=config.Limits(
            scan_batch=7, inflight_budget=70, lease_seconds=60, redrive_budget=0, work_rounds=5,
            max_retry_delay=3600,
        ),
        webhook_allow="127.0.0.1/32",
        email_sender="a@b.example",
        webhook_connect_timeout=1.5,
        webhook_read_timeout=2.0,
        send_timeout=4.5,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"REMINDERS_SCAN_BATCH": "abc"}, "REMINDERS_SCAN_BATCH must be a whole number, got 'abc'"),
        ({"REMINDERS_SCAN_BATCH": "0"}, "REMINDERS_SCAN_BATCH must be between 1 and 10000, got 0"),
        (
            {"REMINDERS_SCAN_BATCH": "10001"},
            "REMINDERS_SCAN_BATCH must be between 1 and 10000, got 10001",
        ),
        ({"REMINDERS_SCAN_BATCH": "1.5"}, "REMINDERS_SCAN_BATCH must be a whole number, got '1.5'"),
        (
            {"REMINDERS_LEASE_SECONDS": "4"},
            "REMINDERS_LEASE_SECONDS must be between 5 and 43200, got 4",
        ),
        (
            {"REMINDERS_INFLIGHT_BUDGET": "-1"},
            "REMINDERS_INFLIGHT_BUDGET must be between 1 and 1000000, got -1",
        ),
        (
            {"REMINDERS_REDRIVE_BUDGET": "101"},
            "REMINDERS_REDRIVE_BUDGET must be between 0 and 100, got 101",
        ),
        ({"REMINDERS_DB_PREPARE": "maybe"}, "REMINDERS_DB_PREPARE must be on or off, got 'maybe'"),
        (
            {"REMINDERS_WEBHOOK_READ_TIMEOUT": "soon"},
            "REMINDERS_WEBHOOK_READ_TIMEOUT must be a number of seconds, got 'soon'",
        ),
        (
            {"REMINDERS_WEBHOOK_CONNECT_TIMEOUT": "0"},
            "REMINDERS_WEBHOOK_CONNECT_TIMEOUT must be between 0 and 120 seconds, got 0.0",
        ),
        (
            {"REMINDERS_SEND_TIMEOUT": "121"},
            "REMINDERS_SEND_TIMEOUT must be between 0 and 120 seconds, got 121.0",
        ),
        (
            {"REMINDERS_SEND_TIMEOUT": "later"},
            "REMINDERS_SEND_TIMEOUT must be a number of seconds, got 'later'",
        ),
        (
            {"REMINDERS_MAX_RETRY_DELAY": "59"},
            "REMINDERS_MAX_RETRY_DELAY must be between 60 and 2592000, got 59",
        ),
        (
            {"REMINDERS_MAX_RETRY_DELAY": "2592001"},
            "REMINDERS_MAX_RETRY_DELAY must be between 60 and 2592000, got 2592001",
        ),
        (
            {"REMINDERS_MAX_RETRY_DELAY": "1d"},
            "REMINDERS_MAX_RETRY_DELAY must be a whole number, got '1d'",
        ),
        (
            {"REMINDERS_QUEUE_URL": "http://q/deliveries"},
            "queue settings incomplete: REMINDERS_DLQ_URL, REMINDERS_PARKING_QUEUE_URL not set",
        ),
        (
            {"REMINDERS_DLQ_URL": "http://q/dlq"},
            "queue settings incomplete: REMINDERS_QUEUE_URL, REMINDERS_PARKING_QUEUE_URL not set",
        ),
        (
            {"REMINDERS_QUEUE_URL": "http://q/deliveries", "REMINDERS_DLQ_URL": "http://q/dlq"},
            "queue settings incomplete: REMINDERS_PARKING_QUEUE_URL not set",
        ),
    ],
)
def test_config_rejects_bad_values_naming_the_variable(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE_ENV, **extra})
    assert str(err.value) == message


def test_config_without_a_database_says_how_to_get_one() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({"REMINDERS_DB_HOST": "db.internal"})
    assert str(err.value) == (
        "no database configured: set DATABASE_URL, or REMINDERS_DB_HOST with "
        "REMINDERS_DB_SECRET_ARN (run `reminders local up` for a local one)"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("ON", True),
        ("yes", True),
        ("0", False),
        ("False", False),
        ("off", False),
        ("no", False),
        ("", False),
    ],
)
def test_config_db_prepare_values(raw: str, expected: bool) -> None:
    assert config.load({**BASE_ENV, "REMINDERS_DB_PREPARE": raw}).db_prepare is expected


def test_require_queues_names_all_three_variables() -> None:
    with pytest.raises(ConfigError) as err:
        config.require_queues(config.load(dict(BASE_ENV)))
    assert str(err.value) == (
        "no queues configured: set REMINDERS_QUEUE_URL, REMINDERS_DLQ_URL and "
        "REMINDERS_PARKING_QUEUE_URL (run `reminders local up` for local ones)"
    )


def test_channels_are_made_on_first_use_and_keyed_ones_known_without_making_them() -> None:
    from reminders.runtime import build_channels

    made: list[str] = []

    def client(service: str, client_config: object) -> object:
        made.append(service)
        raise AssertionError("no client should be needed to ask which channels are keyed")

    settings = config.load({"DATABASE_URL": "postgresql:///x"})
    channels = build_channels(settings, client)
    assert channels.idempotent() == ["webhook"]
    assert sorted(channels) == ["email", "sms", "webhook"]
    assert channels["webhook"].honours_idempotency_key is True
    assert made == []


def test_in_lambda_a_bad_setting_fails_the_cold_start_with_one_clear_error() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REMINDERS_") and k != "DATABASE_URL"}
    env.update({"AWS_LAMBDA_FUNCTION_NAME": "scanner", "DATABASE_URL": "postgresql:///x",
                "REMINDERS_QUEUE_URL": "http://q", "REMINDERS_DLQ_URL": "http://d",
                "REMINDERS_PARKING_QUEUE_URL": "http://p", "REMINDERS_SCAN_BATCH": "lots",
                "AWS_DEFAULT_REGION": "us-east-1"})
    for name in ("scanner", "consumer", "redrive", "migrate"):
        done = subprocess.run([sys.executable, "-c", f"import functions.{name}.handler"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, name
        assert done.stderr.strip().splitlines()[-1] == (
            "reminders.errors.ConfigError: REMINDERS_SCAN_BATCH must be a whole number, "
            "got 'lots'"), name


def test_the_webhook_channel_gets_the_send_timeout() -> None:
    from reminders.channels.webhook import WebhookChannel
    from reminders.runtime import build_channels

    def client(service: str, client_config: object) -> object:
        raise AssertionError("the webhook channel needs no AWS client")

    settings = config.load({"DATABASE_URL": "postgresql:///x", "REMINDERS_SEND_TIMEOUT": "4.5",
                            "REMINDERS_WEBHOOK_READ_TIMEOUT": "2"})
    webhook = build_channels(settings, client)["webhook"]
    assert isinstance(webhook, WebhookChannel)
    assert (webhook.send_timeout, webhook.read_timeout) == (4.5, 2.0)


# ---------------------------------------------------------------- help


def _commands() -> list[tuple[str, argparse.ArgumentParser]]:
    from reminders.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found.append((f"{path} {name}".strip(), child))
                    walk(child, f"{path} {name}")

    walk(build_parser(), "")
    return found


def test_every_option_has_help_and_every_command_an_example() -> None:
    for name, parser in _commands():
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                assert action.help, (name, action.option_strings or action.dest)
        assert "e.g." in parser.format_help().lower(), name


@pytest.mark.parametrize("schema", ["Reminders", "a-b", "1st", "pg_reminders", "x;drop", "a b",
                                    "r" * 64])
def test_the_schema_setting_must_be_a_plain_identifier(schema: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE_ENV, "REMINDERS_DB_SCHEMA": schema})
    assert str(err.value).startswith("REMINDERS_DB_SCHEMA must be a lower-case identifier")
    assert repr(schema) in str(err.value)


def test_the_schema_setting_defaults_to_reminders() -> None:
    assert config.load(dict(BASE_ENV)).db_schema == "reminders"
    assert config.load({**BASE_ENV, "REMINDERS_DB_SCHEMA": "svc_2"}).db_schema == "svc_2"
    assert config.load(dict(BASE_ENV)).limits.first_batch == 100
