"""The twin as `reminders demo` and the drills run it: the template's queues, functions,
mappings, rule and migrations custom resource on the tests' Postgres and moto. A value changed
in a copy of the template fails the run naming its resource and property; an invocation past
its Timeout is killed and its batch comes back."""

from __future__ import annotations

import copy
import json
import shutil
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reminders import db
from reminders.clock import SharedClock
from reminders.local import roles
from reminders.local.twin.assets import FunctionAssets, build_assets
from reminders.local.twin.instances import FunctionFailed
from reminders.local.twin.run import Twin, TwinError
from reminders.local.twin.template import PlanError
from tests.aws_principals import secrets_key
from tests.conftest import T0, Harness
from tests.integration.pipeline_helpers import delivery, schedule_webhook

# A consumer whose first invocation overruns its Timeout before it does anything; later ones
# are the real consumer. The marker file says whether the first one happened.
SLOW_FIRST = '''"""A consumer that hangs once (the twin's Timeout test)."""
import os
import time

from functions.consumer.handler import handler as consumer


def handler(event, context):
    marker = os.environ["TWIN_TEST_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(120)
    return consumer(event, context)
'''


@pytest.fixture(scope="module")
def assets() -> FunctionAssets:
    return build_assets()


@pytest.fixture(scope="module")
def template() -> Any:
    return roles.synthesized_template(roles.SELF_PUBLISHING)


def logical_id(template: Any, pattern: str) -> str:
    (found,) = [str(k) for k in template["Resources"] if k.startswith(pattern)
                and k[len(pattern):].isalnum() and len(k) == len(pattern) + 8]
    return found


def consumer_id(template: Any) -> str:
    return logical_id(template, "FunctionsConsumer")


def make_twin(h: Harness, template: Any, assets: FunctionAssets, tmp_path: Path,
              **kwargs: Any) -> Twin:
    root = tmp_path / f"twin-{uuid.uuid4().hex[:6]}"
    root.mkdir()
    # Longer than the consumer's batching window (1 s) and a cold start: a message comes back
    # only when its batch failed.
    kwargs.setdefault("visibility_timeout_override", 4)
    kwargs.setdefault("max_receive_count_override", 2)
    return Twin(template, endpoint_url=h.endpoint, database_url=h.rt.settings.database_url,
                prefix=f"tw{uuid.uuid4().hex[:6]}", clock=SharedClock(T0, str(root / "clock")),
                log_dir=root / "logs", secrets_key_arn=secrets_key(h.endpoint), assets=assets,
                **kwargs)


def test_a_reminder_goes_through_the_templates_rule_mapping_and_functions(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-run-1", at=T0)
        tick = twin.tick()
        work = twin.work(max_seconds=30)
        warm = {name: pool.instances for name, pool in twin.pools.items()}
    pools = {name: pool.instances for name, pool in twin.pools.items()}
    assert warm["scanner"] == 1 and warm["consumer"] >= 1
    assert tick["published"] == 1
    assert work["idle"] and work["consumer"]["records"] == 1
    assert delivery(harness, key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}
    assert pools["scanner"] == 0 and pools["consumer"] == 0  # closed: every process stopped
    names = {(k.namespace, k.name) for k in twin.metrics.keys()}  # noqa: SIM118 (a store)
    assert ("AWS/Lambda", "Invocations") in names  # the hook the alarms read
    assert ("AWS/SQS", "ApproximateAgeOfOldestMessage") in names
    assert any(namespace == "Reminders" for namespace, _ in names)  # the functions' EMF lines


def test_the_migrations_custom_resource_gets_create_then_update_as_cloudformation_sends_them(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    state = tmp_path / "custom-resources.json"
    events: list[dict[str, Any]] = []

    def capture(twin: Twin) -> None:
        framework = twin.framework

        def recorded(event: dict[str, Any]) -> None:
            events.append(event)
            framework(event)

        twin.framework = recorded  # type: ignore[method-assign]

    first = make_twin(harness, template, assets, tmp_path, state_file=state)
    capture(first)
    first.start().close()
    again = make_twin(harness, template, assets, tmp_path, state_file=state)
    changed = copy.deepcopy(template)
    migrations = logical_id(template, "MigrationsApply")
    changed["Resources"][migrations]["Properties"]["Fingerprint"] = "0" * 64
    moved = make_twin(harness, changed, assets, tmp_path, state_file=state)
    capture(again)
    capture(moved)
    again.start().close()  # a new application secret: its ARN changed, so an Update
    moved.start().close()
    create, update, fingerprint = events
    assert create["RequestType"] == "Create" and "PhysicalResourceId" not in create
    assert create["LogicalResourceId"] == migrations
    assert set(create) == {"RequestType", "ServiceToken", "ResponseURL", "StackId",
                           "RequestId", "LogicalResourceId", "ResourceType",
                           "ResourceProperties"}
    assert create["ResourceProperties"]["ServiceToken"] == create["ServiceToken"]
    assert create["ResourceProperties"]["OwnsDatabase"] == "true"
    assert create["ResponseURL"].startswith("http://127.0.0.1:")
    assert first.migrations_response is not None
    assert first.migrations_response["Status"] == "SUCCESS"
    assert update["RequestType"] == "Update"
    assert update["PhysicalResourceId"] == first.migrations_response["PhysicalResourceId"]
    assert update["OldResourceProperties"] == create["ResourceProperties"]
    assert fingerprint["OldResourceProperties"]["Fingerprint"] != "0" * 64
    assert fingerprint["ResourceProperties"]["Fingerprint"] == "0" * 64
    # The functions log in as the application role the Create made, not as the master.
    assert first.app_login is not None
    login = harness.conn.execute(
        "select rolname from pg_roles where rolname = %s", (first.app_login[0],)).fetchone()
    assert login is not None


@pytest.mark.refusals_expected
def test_an_invocation_past_its_timeout_is_killed_and_its_batch_comes_back_once(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    code = tmp_path / "code"
    shutil.copytree(assets.code, code)
    (code / "slow_first.py").write_text(SLOW_FIRST)
    marker = tmp_path / "hung-once"
    slow = copy.deepcopy(template)
    props = slow["Resources"][consumer_id(template)]["Properties"]
    # Long enough for the consumer's own check (the longest send, 15 s for the AWS channels,
    # and its recording fit, margin 1 s), short against the hang.
    variables = props["Environment"]["Variables"]
    variables.update({"REMINDERS_SEND_TIMEOUT": "1", "REMINDERS_INVOCATION_MARGIN": "1",
                      "REMINDERS_DB_STATEMENT_TIMEOUT_MS": "1000",
                      "TWIN_TEST_MARKER": str(marker)})
    props.update(Handler="slow_first.handler", Timeout=23)
    # As Lambda requires of a mapping's queue: its visibility timeout at least the Timeout.
    with make_twin(harness, slow, replace(assets, code=code), tmp_path,
                   visibility_timeout_override=24) as twin:
        (key,) = schedule_webhook(harness, "twin-timeout-1", at=T0)
        assert twin.tick()["published"] == 1
        work = twin.work(max_seconds=60)
        consumer = twin.pollers["consumer"]
    assert marker.exists()
    assert work["idle"], work
    # The first batch timed out (its error is Lambda's) and came back; the second delivered it.
    assert consumer.counts.first_error is not None
    assert "Task timed out after 23.00 seconds" in consumer.counts.first_error
    assert consumer.counts.batches == 2 and consumer.counts.failures == 1
    row = delivery(harness, key)
    assert row["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}
    (ledger,) = db.fetch_all(harness.conn, "attempts_of_delivery",
                             {"id": row["id"], "tenant": "acme"})
    assert ledger["outcome"] == "sent"


def test_a_changed_handler_path_fails_the_run_naming_the_function_and_handler(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    changed = copy.deepcopy(template)
    consumer = consumer_id(template)
    changed["Resources"][consumer]["Properties"]["Handler"] = "functions.consumer.handlr.handler"
    with make_twin(harness, changed, assets, tmp_path) as twin:
        schedule_webhook(harness, "twin-handler-1", at=T0)
        twin.tick()
        with pytest.raises(TwinError) as failed:
            twin.work(max_seconds=20)
    assert str(failed.value).startswith(f"{consumer} Handler: Runtime.ImportModuleError")


def test_a_misspelt_environment_variable_fails_the_run_naming_the_function_and_environment(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    changed = copy.deepcopy(template)
    scanner = logical_id(template, "FunctionsScanner")
    variables = changed["Resources"][scanner]["Properties"]["Environment"]["Variables"]
    misspelt = "REMINDERS_SCAN_BATCH".replace("BATCH", "BACH")  # not a name in the tree
    variables[misspelt] = variables.pop("REMINDERS_SCAN_BATCH")
    with make_twin(harness, changed, assets, tmp_path) as twin, \
            pytest.raises(FunctionFailed) as failed:
        twin.tick()
    assert str(failed.value).startswith(f"{scanner} Environment: ConfigError")
    assert misspelt in str(failed.value)


def test_a_changed_dead_letter_max_receive_count_fails_the_start_naming_queue_and_property(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    changed = copy.deepcopy(template)
    dlq = logical_id(template, "QueuesDeadLetter")
    policy = changed["Resources"][dlq]["Properties"]["RedrivePolicy"]
    policy["maxReceiveCount"] = 0
    with pytest.raises(PlanError) as failed:
        make_twin(harness, changed, assets, tmp_path).start()
    assert str(failed.value) == (f"{dlq}: RedrivePolicy.maxReceiveCount must be an integer "
                                 "1-1000, got 0")


def test_the_twin_stops_its_processes_when_its_start_fails(
        harness: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> None:
    changed = copy.deepcopy(template)
    migrate = logical_id(template, "FunctionsMigrate")
    changed["Resources"][migrate]["Properties"]["Handler"] = "functions.migrate.nothing.handler"
    twin = make_twin(harness, changed, assets, tmp_path)
    with pytest.raises(FunctionFailed) as failed:
        twin.start()
    assert str(failed.value).startswith(f"{migrate} Handler:")
    assert all(pool.instances == 0 for pool in twin.pools.values())
    assert json.loads(json.dumps(twin.init_problems))  # the problem is kept for the report
