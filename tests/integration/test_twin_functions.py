"""The template's functions run from their built assets, each instance a process of its own
through the real Lambda Runtime API client, with the template's Handler, Environment, Timeout
and MemorySize enforced.

One set of assets (the code asset, the layer for this machine, the runtime folder) is built
for the module; the tests that need a handler of their own put it in a copy of the code
asset and point a copy of the template's function at it."""

from __future__ import annotations

import copy
import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reminders import config
from reminders.aws_http import Credentials
from reminders.clock import iso
from reminders.local import roles, stack
from reminders.local.moto_server import ACCOUNT
from reminders.local.twin.assets import FunctionAssets, build_assets, layer_difference
from reminders.local.twin.functions import FunctionSpec, SpecError, function_specs
from reminders.local.twin.instances import FunctionPool, InstanceError, lambda_environment
from reminders.local.twin.references import REF, LocalValues, queue_values, values_by_name
from tests.aws_principals import make_roles
from tests.conftest import Harness
from tests.integration.pipeline_helpers import delivery, schedule_webhook, take_messages
from tests.twin_helpers import database_secret, scheduled_event, twin_pool

PROBE = '''"""A handler of the twin's tests, in a copy of the code asset."""
import importlib.util
import os
import sys
import time


def handler(event, context):
    time.sleep(event.get("sleep", 0))
    held = [b"\\x01" * (8 * 2**20) for _ in range(event.get("allocate_mib", 0) // 8)
            if time.sleep(0.002) is None]
    return {"pid": os.getpid(), "path": sys.path, "held": len(held),
            "found": {name: importlib.util.find_spec(name) is not None
                      for name in event.get("find", [])},
            "reminders": importlib.util.find_spec("reminders").origin,
            "remaining_ms": context.get_remaining_time_in_millis()}
'''
FAKE_ROLE = Credentials("AKIDTWIN", "secret", "token")


@pytest.fixture(scope="module")
def assets() -> FunctionAssets:
    return build_assets()


@pytest.fixture(scope="module")
def template() -> Any:
    return roles.synthesized_template(roles.SELF_PUBLISHING)


@pytest.fixture(scope="module")
def probe_assets(assets: FunctionAssets, tmp_path_factory: pytest.TempPathFactory
                 ) -> FunctionAssets:
    code = tmp_path_factory.mktemp("twin") / "code"
    shutil.copytree(assets.code, code)
    (code / "probe.py").write_text(PROBE)
    return replace(assets, code=code)


def offline_values(template: Any) -> LocalValues:
    """Stand-ins for every resource the functions' settings name, none of them reachable: for
    the tests whose handler calls nothing."""
    queues = {name: queue_values(f"http://127.0.0.1:9/{ACCOUNT}/twin-{name}", stack.REGION,
                                 ACCOUNT) for name in ("deliveries", "dlq", "parking")}
    return LocalValues(stack.REGION, ACCOUNT, values_by_name(template, {
        **queues, "proxy": {"Endpoint": "127.0.0.1"},
        "app_secret": {REF: "arn:aws:secretsmanager:us-east-1:1:secret:app"},
        "master_secret": {REF: "arn:aws:secretsmanager:us-east-1:1:secret:master"}}))


def function_resource(template: Any, name: str) -> tuple[str, dict[str, Any]]:
    logical_id, resource = roles._function(template, name)
    return logical_id, resource


def changed(template: Any, name: str, **props: Any) -> Any:
    """A copy of ``template`` whose function ``name`` has ``props`` instead."""
    changed_template = copy.deepcopy(template)
    logical_id, _ = function_resource(template, name)
    changed_template["Resources"][logical_id]["Properties"].update(props)
    return changed_template


def probe_spec(template: Any, **props: Any) -> FunctionSpec:
    """The redrive function of a copy of the template, its Handler the probe's."""
    probe = changed(template, "redrive", Handler="probe.handler", **props)
    return function_specs(probe, offline_values(probe))["redrive"]


def pool(spec: FunctionSpec, assets: FunctionAssets, tmp_path: Path,
         extra: dict[str, str] | None = None, **kwargs: Any) -> FunctionPool:
    env = lambda_environment(spec, assets, region=stack.REGION, credentials=FAKE_ROLE,
                             extra=extra)
    return FunctionPool(spec, assets, env, tmp_path / "logs", stack.REGION, ACCOUNT, **kwargs)


# ---------------------------------------------------------------- the assets


def test_the_twin_layer_holds_exactly_the_shipped_layers_pinned_versions(
        assets: FunctionAssets, template: Any) -> None:
    from infra.layer import build_layer, resolved_versions

    shipped = build_layer()  # the arm64 layer synth packages (current: reused)
    assert layer_difference(assets.layer, shipped) == []
    names = resolved_versions(assets.layer / "python")
    assert {"psycopg", "psycopg-binary", "cryptography", "aws-lambda-powertools"} <= set(names)
    # and its wheels are this machine's, not arm64's
    assert list((assets.layer / "python").glob("psycopg_binary*/**/*x86_64*")) or \
        list((assets.layer / "python").glob("psycopg_binary.libs/*"))


def test_a_layer_difference_names_the_distribution_and_both_versions(tmp_path: Path) -> None:
    for layer, version in (("twin", "3.3.1"), ("shipped", "3.3.2")):
        (tmp_path / layer / "python" / f"psycopg-{version}.dist-info").mkdir(parents=True)
        (tmp_path / layer / "python" / "tzdata-2025.2.dist-info").mkdir()
    assert layer_difference(tmp_path / "twin", tmp_path / "shipped") == [
        "psycopg: 3.3.2 in shipped, 3.3.1 in twin"]


# ---------------------------------------------------------------- a real function


def test_the_scanner_leases_and_publishes_from_its_built_assets(
        harness: Harness, moto_endpoint: str, queue_urls: config.QueueUrls,
        assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    h, urls = harness, queue_urls
    (key,) = schedule_webhook(h, "twin-scan-1", at=h.clock.now())
    database_url = h.rt.settings.database_url
    secret_arn = database_secret(moto_endpoint, database_url)
    role = make_roles(moto_endpoint, urls, ("scanner",), app_secret=secret_arn)["scanner"]
    with twin_pool(template, "scanner", assets, endpoint=moto_endpoint, urls=urls,
                   database_url=database_url, secret_arn=secret_arn,
                   credentials=role.credentials, log_dir=tmp_path,
                   now=iso(h.clock.now())) as scanners:
        first = scanners.invoke(scheduled_event(iso(h.clock.now())))
        first.raise_for_error()
        again = scanners.invoke(scheduled_event(iso(h.clock.now())))
        again.raise_for_error()
    assert first.cold and first.json()["published"] == 1
    assert not again.cold and again.pid == first.pid and again.json()["leased"] == 0
    (message,) = take_messages(h)
    row = delivery(h, key)  # leased by the tick: a pending lease, the message carrying it
    assert json.loads(message["Body"]) == {"delivery_id": row["id"],
                                           "lease_token": str(row["pending_lease_token"])}


# ---------------------------------------------------------------- isolation


def test_nothing_of_the_development_venv_is_importable_inside(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    with pool(probe_spec(template), probe_assets, tmp_path) as probes:
        answer = probes.invoke({"find": ["pytest", "moto", "hypothesis", "psycopg",
                                         "boto3", "awslambdaric"]}).json()
    assert answer["found"] == {"pytest": False, "moto": False, "hypothesis": False,
                               "psycopg": True, "boto3": True, "awslambdaric": True}
    assert not [p for p in answer["path"] if ".venv" in p or "site-packages" in p]
    assert answer["path"][:4] == [str(probe_assets.code), *probe_assets.python_path]
    assert answer["reminders"] == str(probe_assets.code / "reminders" / "__init__.py")


# ---------------------------------------------------------------- bounds


def test_an_invocation_past_its_timeout_is_killed_and_the_next_starts_a_new_process(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    spec = probe_spec(template, Timeout=1)
    with pool(spec, probe_assets, tmp_path) as probes:
        warm = probes.invoke({})
        assert warm.ok and warm.json()["remaining_ms"] <= 1000
        slow = probes.invoke({"sleep": 5})
        after = probes.invoke({})
    assert slow.error is not None and slow.error["errorType"] == "Sandbox.Timedout"
    assert slow.error["errorMessage"].endswith("Task timed out after 1.00 seconds")
    assert slow.pid == warm.pid and not slow.cold
    assert after.ok and after.cold and after.pid != warm.pid


def test_an_instance_over_its_memory_size_is_killed_as_out_of_memory(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    spec = probe_spec(template, MemorySize=128)
    with pool(spec, probe_assets, tmp_path) as probes:
        small = probes.invoke({"allocate_mib": 32})
        big = probes.invoke({"allocate_mib": 400})
        after = probes.invoke({})
    assert small.ok and small.json()["held"] == 4
    assert big.error == {"errorType": "Runtime.OutOfMemory", "errorMessage":
                         f"RequestId: {big.request_id} Error: Runtime exited with error: "
                         "signal: killed"}
    assert 128 < big.max_memory_mib < 400
    assert after.ok and after.cold and after.pid != small.pid


# ---------------------------------------------------------------- init failures


def test_a_changed_handler_fails_naming_the_function_and_handler(
        assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    wrong = changed(template, "redrive", Handler="functions.redrive.handlr.handler")
    spec = function_specs(wrong, offline_values(wrong))["redrive"]
    with pool(spec, assets, tmp_path) as redrive:
        result = redrive.invoke({"Records": []})
    assert result.error is not None and result.cold
    assert result.problem.startswith(f"{spec.logical_id} Handler: Runtime.ImportModuleError: "
                                     "Unable to import module 'functions.redrive.handlr'")


def test_a_missing_handler_function_fails_naming_the_handler(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    spec = replace(probe_spec(template), handler="probe.handle")
    with pool(spec, probe_assets, tmp_path) as probes:
        result = probes.invoke({})
    assert result.problem == (f"{spec.logical_id} Handler: Runtime.HandlerNotFound: "
                              "Handler 'handle' missing on module 'probe'")
    with pytest.raises(Exception, match=f"{spec.logical_id} Handler"):
        result.raise_for_error()


def test_a_module_in_no_asset_fails_naming_the_layers(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    code = tmp_path / "code"
    shutil.copytree(probe_assets.code, code)
    (code / "needs.py").write_text("import yaml\n\ndef handler(event, context):\n    pass\n")
    spec = replace(probe_spec(template), handler="needs.handler")
    with pool(spec, replace(probe_assets, code=code), tmp_path) as needs:
        result = needs.invoke({})
    assert result.problem == (f"{spec.logical_id} Layers: Runtime.ImportModuleError: Unable to "
                              "import module 'needs': No module named 'yaml'")


def test_a_misspelt_setting_fails_the_cold_start_naming_environment(
        assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    logical_id, resource = function_resource(template, "scanner")
    variables = dict(resource["Properties"]["Environment"]["Variables"])
    misspelt = "REMINDERS_QUEUE_URL".replace("URL", "ULR")  # (spelt out, the name scan flags it)
    variables[misspelt] = variables.pop("REMINDERS_QUEUE_URL")
    wrong = changed(template, "scanner", Environment={"Variables": variables})
    spec = function_specs(wrong, offline_values(wrong))["scanner"]
    with pool(spec, assets, tmp_path) as scanner:
        result = scanner.invoke(scheduled_event("2027-03-01T09:00:00Z"))
    assert result.problem.startswith(
        f"{logical_id} Environment: ConfigError: unknown setting: {misspelt} "
        "(did you mean REMINDERS_QUEUE_URL?)")


def test_a_setting_naming_a_resource_with_no_stand_in_fails_naming_environment(
        template: Any) -> None:
    logical_id, resource = function_resource(template, "scanner")
    variables = dict(resource["Properties"]["Environment"]["Variables"])
    variables["REMINDERS_QUEUE_URL"] = {"Ref": "QueuesDeliverise00000000"}
    wrong = changed(template, "scanner", Environment={"Variables": variables})
    with pytest.raises(SpecError, match=f"^{logical_id} Environment: REMINDERS_QUEUE_URL: "
                                        "names QueuesDeliverise00000000"):
        function_specs(wrong, offline_values(wrong))


@pytest.mark.parametrize(("prop", "value", "problem"), [
    ("Handler", None, "missing"),
    ("Handler", "handler", "is not module.function"),
    ("Timeout", 901, "is not a whole number from 1 to 900"),
    ("MemorySize", "256", "is not a whole number from 128 to 10240"),
    ("Layers", [{"Ref": "NoSuchLayer"}], "is not a Ref to a layer of the template"),
    ("Code", {"ZipFile": "def handler(e, c): pass"}, "not an asset"),
    ("Environment", {"Variables": {"AWS_REGION": "eu-west-1"}}, "AWS_REGION is reserved"),
])
def test_a_malformed_property_is_named_with_its_resource(
        template: Any, prop: str, value: Any, problem: str) -> None:
    logical_id, _ = function_resource(template, "consumer")
    wrong = changed(template, "consumer", **{prop: value})
    if value is None:
        del wrong["Resources"][logical_id]["Properties"][prop]
    with pytest.raises(SpecError, match=f"^{logical_id} {prop}: .*{problem}"):
        function_specs(wrong, offline_values(wrong))


# ---------------------------------------------------------------- the pool


def test_concurrent_invocations_get_instances_of_their_own_up_to_the_limit(
        probe_assets: FunctionAssets, template: Any, tmp_path: Path) -> None:
    results: list[Any] = []
    with pool(probe_spec(template), probe_assets, tmp_path, max_instances=2,
              wait_seconds=0.3) as probes:
        threads = [threading.Thread(target=lambda: results.append(probes.invoke({"sleep": 1})))
                   for _ in range(2)]
        for thread in threads:
            thread.start()
        while probes.instances < 2:
            threading.Event().wait(0.01)
        with pytest.raises(InstanceError, match=r"all 2 instances busy for 0\.3 s"):
            probes.invoke({})
        for thread in threads:
            thread.join(10)
        warm = probes.invoke({})
        assert probes.instances == 2
    assert len({r.pid for r in results}) == 2 and all(r.ok and r.cold for r in results)
    assert warm.ok and not warm.cold and warm.pid in {r.pid for r in results}


def test_close_stops_every_instance(probe_assets: FunctionAssets, template: Any,
                                    tmp_path: Path) -> None:
    import os

    probes = pool(probe_spec(template), probe_assets, tmp_path)
    pid = probes.invoke({}).pid
    assert pid is not None
    probes.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(InstanceError, match="closed"):
        probes.invoke({})
