"""Every retry Lambda makes of a publisher chunk can still do its work: read from the
synthesized template (the publisher's EventInvokeConfig and Timeout, the consumer's Timeout,
the lease the scanner takes) against Lambda's documented retry schedule, each retry must start
within the event's maximum age and reach the queue while the lease it carries has a
consumer's whole run left. A retry that cannot is a retry in name only: Lambda drops the event
first, or the consumer finds the lease reclaimed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from infra.settings import PUBLISH_HANDOVER_SECONDS, Settings, SettingsError
from tests.infra.synth import Synthesized

# Lambda's asynchronous invocation: "waits one minute before the first retry ... two minutes
# before the second" (Lambda developer guide, "Error handling and automatic retries").
LAMBDA_RETRY_WAITS = (60, 120)


def _function(template: Mapping[str, Any], label: str) -> tuple[str, dict[str, Any]]:
    """A function of the template by its construct label (Publisher, Consumer, Scanner)."""
    (found,) = [(logical_id, r) for logical_id, r in template["Resources"].items()
                if r["Type"] == "AWS::Lambda::Function" and logical_id.startswith(
                    f"Functions{label}") and "Role" not in logical_id]
    return found


def retry_violations(template: Mapping[str, Any]) -> list[str]:
    """Each retry of the publisher's configuration that cannot run in time, in words."""
    publisher_id, publisher = _function(template, "Publisher")
    (config,) = [r["Properties"] for r in template["Resources"].values()
                 if r["Type"] == "AWS::Lambda::EventInvokeConfig"
                 and r["Properties"]["FunctionName"] == {"Ref": publisher_id}]
    retries = int(config["MaximumRetryAttempts"])
    age = int(config["MaximumEventAgeInSeconds"])
    timeout = int(publisher["Properties"]["Timeout"])
    consumer = int(_function(template, "Consumer")[1]["Properties"]["Timeout"])
    lease = int(_function(template, "Scanner")[1]["Properties"]["Environment"]["Variables"][
        "REMINDERS_LEASE_SECONDS"])
    found = []
    if retries > len(LAMBDA_RETRY_WAITS):
        found.append(f"{retries} retries: Lambda makes at most {len(LAMBDA_RETRY_WAITS)}")
    for k in range(1, min(retries, len(LAMBDA_RETRY_WAITS)) + 1):
        # Latest start: every try before it ran its whole timeout, then Lambda waited.
        start = sum(LAMBDA_RETRY_WAITS[:k]) + k * timeout
        if start > age:
            found.append(f"retry {k} may start {start} s after the first try, past the "
                         f"maximum event age {age} s: Lambda drops the event instead")
        usable = start + PUBLISH_HANDOVER_SECONDS + timeout + consumer
        if usable > lease:
            found.append(f"retry {k} may reach the queue {usable - consumer} s after the "
                         f"lease, leaving less than a consumer's {consumer} s before the "
                         f"lease expires ({lease} s)")
    # An event Lambda keeps (throttled, backed up) must not outlive its lease's use either.
    if age + PUBLISH_HANDOVER_SECONDS + timeout + consumer > lease:
        found.append(f"an event {age} s old (the maximum age) still runs, and its chunk "
                     f"reaches the queue too late for a consumer before the lease expires "
                     f"({lease} s)")
    return found


def test_every_publisher_retry_runs_within_the_age_and_the_lease(default: Synthesized) -> None:
    assert retry_violations(default.json) == []
    (config,) = [r["Properties"] for r in default.json["Resources"].values()
                 if r["Type"] == "AWS::Lambda::EventInvokeConfig"
                 and r["Properties"]["FunctionName"] == {"Ref": _function(
                     default.json, "Publisher")[0]}]
    assert config["MaximumRetryAttempts"] == 2  # both of them real
    assert config["MaximumEventAgeInSeconds"] == Settings().publisher_max_event_age_seconds


def _with(template: Mapping[str, Any], *, age: int | None = None,
          lease: int | None = None) -> dict[str, Any]:
    changed = copy.deepcopy(dict(template))
    publisher_id, _ = _function(changed, "Publisher")
    for r in changed["Resources"].values():
        if r["Type"] == "AWS::Lambda::EventInvokeConfig" and \
                r["Properties"]["FunctionName"] == {"Ref": publisher_id} and age is not None:
            r["Properties"]["MaximumEventAgeInSeconds"] = age
    if lease is not None:
        _function(changed, "Scanner")[1]["Properties"]["Environment"]["Variables"][
            "REMINDERS_LEASE_SECONDS"] = str(lease)
    return changed


def test_an_age_the_second_retry_cannot_start_within_fails(default: Synthesized) -> None:
    """2 retries with a 120 s age: the second retry's turn (3 minutes and more after the first
    try) is always past the age, so the configuration gives one retry, not two."""
    (violation,) = retry_violations(_with(default.json, age=120))
    assert violation.startswith("retry 2 may start 240 s after the first try, past the "
                                "maximum event age 120 s")


def test_a_lease_that_expires_before_a_retry_can_be_used_fails(default: Synthesized) -> None:
    found = retry_violations(_with(default.json, lease=320))
    assert any(v.startswith("retry 2 may reach the queue 280 s after the lease") for v in found)
    assert any("the maximum age" in v for v in found)


@pytest.mark.parametrize("lease", [340, 600, 3600, 43_200])
def test_settings_synth_accepts_give_every_retry_its_time(lease: int) -> None:
    settings = Settings(lease_seconds=lease).validate()
    age = settings.publisher_max_event_age_seconds
    assert 60 <= age <= 21_600
    last = sum(LAMBDA_RETRY_WAITS) + 2 * settings.publisher_timeout_seconds
    assert last <= age
    assert min(age, last) + PUBLISH_HANDOVER_SECONDS + settings.publisher_timeout_seconds + \
        settings.consumer_timeout_seconds <= lease


def test_a_lease_too_short_for_the_retries_fails_synth() -> None:
    with pytest.raises(SettingsError, match="leaseSeconds must be at least 340 with "
                                            "publisherFanOut on, got 339"):
        Settings(lease_seconds=339).validate()
    Settings(lease_seconds=60, publisher_fan_out=False).validate()
