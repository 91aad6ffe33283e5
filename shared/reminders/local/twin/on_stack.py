"""``reminders tick`` and ``reminders work`` on the local stack, run on its twin.

When a command's settings name the stack ``reminders local up`` recorded in REMINDERS_HOME (its
moto, its database, its queues), the command starts a :class:`~reminders.local.twin.run.Twin`
on it: the template's queues (the stack's own, created with the same values, so CreateQueue
answers with them), the functions' roles and secrets, the migrations custom resource's event
(Create the first time, Update after; its properties are kept in ``REMINDERS_HOME/twin``), and
the functions from their built assets in processes of their own. ``tick`` is one firing of the
schedule rule, ``work`` the event source mappings polled until the queues are empty; the twin
is closed (every function process stopped) when the command ends. The functions log in as one
application login kept in ``REMINDERS_HOME/twin/app-login.json`` and one secret holding it, so
repeated commands make no role each, and the custom resource's event is sent only when its
properties change (as CloudFormation sends it).

Where no template can be had (the CDK not installed) or no CPython 3.13 is found, the command
says so on stderr in one line and runs the handlers in its own process;
``REMINDERS_LOCAL_FUNCTIONS=in-process`` asks for that explicitly (and says so too).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reminders.clock import Clock, FixedClock, SharedClock
from reminders.local import stack
from reminders.local.twin.run import Twin

IN_PROCESS = "in-process"
CHOICE_VARIABLE = "REMINDERS_LOCAL_FUNCTIONS"


def recorded_stack(env: Mapping[str, str]) -> stack.LocalStack | None:
    """The local stack of REMINDERS_HOME when ``env`` (a command's settings) names its moto,
    its database and its deliveries queue; None otherwise (AWS, a test's moto, another
    database)."""
    local = stack.load()
    if local is None:
        return None
    database = env.get("DATABASE_URL") or ""
    if env.get("AWS_ENDPOINT_URL") != local.endpoint_url or not database or \
            not stack.same_database(database, local.database_url) or \
            env.get("REMINDERS_QUEUE_URL") != local.queues.get("deliveries"):
        return None
    return local


def twin_root() -> Path:
    return stack.home() / "twin"


def _app_login(root: Path) -> tuple[str, str]:
    path = root / "app-login.json"
    try:
        saved = json.loads(path.read_text())
        return str(saved["user"]), str(saved["password"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    login = (f"twin_app_{secrets.token_hex(4)}", secrets.token_urlsafe(24))
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"user": login[0], "password": login[1]}))
    path.chmod(0o600)
    return login


def start_twin(local: stack.LocalStack, clock: Clock) -> tuple[Twin | None, str]:
    """The local stack's twin, started; or None and why the functions run in this process.
    A fixed clock (REMINDERS_NOW) is handed to the functions' processes in a file of this
    command's own (removed by :func:`close`); the wall clock is each process's own."""
    if os.environ.get(CHOICE_VARIABLE) == IN_PROCESS:
        return None, f"{CHOICE_VARIABLE}={IN_PROCESS}"
    from reminders.local.roles import SELF_PUBLISHING, TemplateError, synthesized_template
    from reminders.local.twin.assets import AssetError, build_assets

    try:
        template = synthesized_template(SELF_PUBLISHING)
        assets = build_assets()
    except (TemplateError, AssetError) as exc:
        return None, str(exc)
    visibility, receives = queue_overrides(local)
    root = twin_root()
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(clock, FixedClock):
        clock = SharedClock(clock.now(), str(root / f"clock-{os.getpid()}"))
    twin = Twin(template, endpoint_url=local.endpoint_url, database_url=local.database_url,
                prefix="reminders", clock=clock, log_dir=root / "logs",
                secrets_key_arn=local.secrets_key_id,
                visibility_timeout_override=visibility, max_receive_count_override=receives,
                assets=assets,
                state_file=root / "custom-resources.json", simulated=False,
                samples_queues=False, app_login=_app_login(root),
                app_secret_name="reminders-twin-app")
    try:
        return twin.start(), ""
    except BaseException:
        close(twin)
        raise


def queue_overrides(local: stack.LocalStack) -> tuple[int, int]:
    """The visibility timeout and maxReceiveCount `reminders local up` made the stack's
    deliveries queue with, read from it: the twin creates the template's queues with the same
    values, so SQS answers with the queues that are there."""
    sqs = stack.aws_client("sqs", local.endpoint_url)
    attributes = sqs.get_queue_attributes(QueueUrl=local.queues["deliveries"], AttributeNames=[
        "VisibilityTimeout", "RedrivePolicy"])["Attributes"]
    policy = json.loads(attributes.get("RedrivePolicy") or "{}")
    return int(attributes["VisibilityTimeout"]), int(policy.get("maxReceiveCount") or 1)


def close(twin: Twin) -> None:
    """Stop the twin's function processes and remove the command's clock file."""
    twin.close()
    if isinstance(twin.clock, SharedClock):
        Path(twin.clock.path).unlink(missing_ok=True)


def alarm_watch(twin: Twin) -> Any:
    """The template's alarms over what the twin's functions emitted (its metric store, the
    functions by the names Lambda knows them by), for ``watch.persisted``."""
    from reminders.local.twin.watch import AlarmWatch

    return AlarmWatch(twin.template, twin.clock, endpoint_url=twin.endpoint_url,
                      sqs=stack.aws_client("sqs", twin.endpoint_url),
                      queues={q.name: q.url for q in twin.queues.values()},
                      names=twin.alarm_names(), store=twin.metrics, simulated=False)
