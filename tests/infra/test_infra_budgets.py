"""The time budgets agree, worst case: what the stack gives each function (its timeout, the
proxy's borrow timeout, its sessions' statement timeout, the queue's visibility, the schedule's
period) against what the functions assume they have (shared/reminders/consumer.py, scanner.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk import App

from infra.settings import SCANNER_TICK_MARGIN_SECONDS, Settings, SettingsError
from reminders import consumer, scanner
from tests.infra.synth import Synthesized


def _settings(**context: object) -> Settings:
    return Settings.from_node(App(context=context).node, environ={})


def _env(synth: Synthesized, name: str) -> dict[str, str]:
    _, fn = synth.function(name)
    return dict(fn["Properties"]["Environment"]["Variables"])


def _timeout(synth: Synthesized, name: str) -> int:
    _, fn = synth.function(name)
    return int(fn["Properties"]["Timeout"])


def _borrow_seconds(synth: Synthesized) -> int:
    (group,) = synth.resources("AWS::RDS::DBProxyTargetGroup").values()
    return int(group["Properties"]["ConnectionPoolConfigurationInfo"]["ConnectionBorrowTimeout"])


def _visibility_seconds(synth: Synthesized, consumer_queue_arn_ref: Any) -> int:
    queues = synth.resources("AWS::SQS::Queue")
    logical_id = consumer_queue_arn_ref["Fn::GetAtt"][0]
    return int(queues[logical_id]["Properties"]["VisibilityTimeout"])


def _period_seconds(synth: Synthesized) -> int:
    (rule,) = synth.resources("AWS::Events::Rule").values()
    count, unit = re.fullmatch(r"rate\((\d+) (\w+?)s?\)",
                               rule["Properties"]["ScheduleExpression"]).groups()  # type: ignore[union-attr]
    return int(count) * {"minute": 60, "hour": 3600, "second": 1}[unit]


def _consumer_mapping(synth: Synthesized) -> dict[str, Any]:
    logical_id, _ = synth.function("consumer")
    for mapping in synth.resources("AWS::Lambda::EventSourceMapping").values():
        if mapping["Properties"]["FunctionName"] == {"Ref": logical_id}:
            return dict(mapping["Properties"])
    raise AssertionError("no event source mapping for the consumer")


def worst_case_violations(synth: Synthesized) -> list[str]:
    """Every budget of the synthesized stack that can be overrun, in words."""
    found: list[str] = []
    env = _env(synth, "consumer")
    borrow = _borrow_seconds(synth)
    statement = int(env["REMINDERS_DB_STATEMENT_TIMEOUT_MS"]) / 1000
    record = borrow + statement  # one transaction: a pooled connection, then its statement
    if borrow > consumer.DB_WAIT_SECONDS:
        found.append(f"the proxy's borrow timeout {borrow} s exceeds the "
                     f"{consumer.DB_WAIT_SECONDS} s the consumer keeps for it")
    send = max(float(env.get("REMINDERS_SEND_TIMEOUT", "15")), consumer.DEFAULT_SEND_SECONDS)
    margin = int(env.get("REMINDERS_INVOCATION_MARGIN", "5"))
    timeout = _timeout(synth, "consumer")
    needed = send + record + margin
    if needed > timeout:
        found.append(f"a consumer batch needs {needed} s to start a send (send {send} + "
                     f"record {record} + margin {margin}), its timeout is {timeout} s")
    visibility = _visibility_seconds(synth, _consumer_mapping(synth)["EventSourceArn"])
    if visibility <= timeout:
        found.append(f"a message reappears ({visibility} s) while its batch may still run "
                     f"({timeout} s)")
    scan = int(_env(synth, "scanner")["REMINDERS_SCAN_SECONDS"])
    scanner_timeout = _timeout(synth, "scanner")
    tick = scan + SCANNER_TICK_MARGIN_SECONDS
    if tick > _period_seconds(synth) or tick > scanner_timeout:
        found.append(f"a tick ({scan} s draining + {SCANNER_TICK_MARGIN_SECONDS} s) outlives "
                     f"its period {_period_seconds(synth)} s or timeout {scanner_timeout} s")
    if scan > scanner_timeout / 2:
        found.append(f"the tick drains {scan} s, more than half its timeout {scanner_timeout}")
    return found


def test_the_scanner_ends_its_steps_after_the_drain_within_the_stack_s_margin() -> None:
    """What the tick does after draining (retention, counts, the lateness the alarms read) is
    cut off by statement timeouts within the margin synth gives a tick beyond its drain."""
    assert scanner.AFTER_DRAIN_SECONDS_MAX <= SCANNER_TICK_MARGIN_SECONDS


def test_the_default_stack_budgets_agree(default: Synthesized) -> None:
    assert worst_case_violations(default) == []
    assert _borrow_seconds(default) == consumer.DB_WAIT_SECONDS


def test_a_stack_with_every_switch_flipped_budgets_agree(switched: Synthesized) -> None:
    assert worst_case_violations(switched) == []


@pytest.mark.parametrize("context", [
    {},
    {"sendTimeoutSeconds": "5", "consumerTimeoutSeconds": "55"},  # e-mail still takes 15 s
    {"dbStatementTimeoutMs": "60000", "consumerTimeoutSeconds": "85"},
    {"scannerTimeoutSeconds": "900"},
    {"scannerTimeoutSeconds": "30", "invocationMarginSeconds": "0"},
])
def test_settings_that_pass_synth_fit_the_consumers_arithmetic(
        context: dict[str, object]) -> None:
    """What synth accepts, the consumer can run: its own check (send, recording through the
    proxy, margin) fits the timeout synth gives it; else synth must refuse."""
    try:
        settings = _settings(**context).validate()
    except SettingsError:
        pytest.fail(f"synth refused {context}")
    send = max(settings.send_timeout_seconds, consumer.DEFAULT_SEND_SECONDS)
    record = consumer.DB_WAIT_SECONDS + settings.db_statement_timeout_ms / 1000
    assert send + record + settings.invocation_margin_seconds <= \
        settings.consumer_timeout_seconds
    assert settings.effective_scan_seconds + SCANNER_TICK_MARGIN_SECONDS <= 60


@pytest.mark.parametrize("context", [
    {"sendTimeoutSeconds": "5", "consumerTimeoutSeconds": "54"},
    {"dbStatementTimeoutMs": "60000", "consumerTimeoutSeconds": "84"},
])
def test_settings_the_consumer_could_not_run_fail_synth(context: dict[str, object]) -> None:
    with pytest.raises(SettingsError, match="consumerTimeoutSeconds must be at least"):
        _settings(**context).validate()
