"""The twin: the synthesized template run on the local stack.

Given the local stack's parts (the pooled Postgres, moto, the webhook receiver) and a template,
:meth:`Twin.start` creates what the template declares, mapped onto them:

- its queues (every ``AWS::SQS::Queue`` with its attributes and redrive policy, in moto; the
  caller's overrides of VisibilityTimeout and maxReceiveCount named and explicit);
- the database's two secrets in moto's Secrets Manager, as the deployed stack has them: the
  master login (the local server's owner) the migrations function reads, and the application
  login the migrations create and the other functions read;
- each service function's IAM role with the template's grants (reminders.local.roles), and a
  :class:`FunctionPool` of it from the built assets, its ``Environment`` resolved to the local
  resources (queue URLs, the secrets' ARNs, the pooler's host for the proxy's endpoint);
- the migrations custom resource, invoked with CloudFormation's Create event (Update, with the
  old properties, when they changed since the last run on the same database), the twin playing
  the Provider framework: it invokes the ``onEvent`` function and PUTs the response to the
  event's ``ResponseURL``, a local endpoint that keeps it;
- a :class:`Poller` per ``AWS::Lambda::EventSourceMapping``, invoking its function's pool;
- the ``rate(1 minute)`` rule: :meth:`Twin.tick` is one firing, an asynchronous invoke of the
  scanner with the rule's target retry policy and the scanner's EventInvokeConfig.

- the publisher function, when the template has one (its fan-out): the scanner's
  ``Invoke(InvocationType=Event)`` reaches the twin's Lambda Invoke endpoint
  (``AWS_ENDPOINT_URL_LAMBDA``; reminders.local.twin.async_invoke), which checks the
  signature and that the caller's role is granted ``lambda:InvokeFunction`` on the
  publisher's ARN by the template, and queues the event; :meth:`Twin.run_async_events` runs
  the queued events with the publisher's ``AWS::Lambda::EventInvokeConfig`` (retries after
  one and two minutes, the maximum event age, an SQS OnFailure destination), on the clock.
  :meth:`Twin.tick` runs what is due after the scanner returns. The variant whose scanner
  publishes to the queue itself (``roles.SELF_PUBLISHING``) has no publisher and needs none.

One clock: the functions' processes read the instant the caller's :class:`SharedClock` writes
(``REMINDERS_CLOCK_FILE``).

Metrics, for the alarms: :attr:`Twin.metrics` is fed with the functions' EMF lines (their
stdout), each invocation's Lambda metrics and the queues' figures at each tick, all stamped on
the injected clock.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from reminders.clock import Clock, SharedClock, iso
from reminders.config import QueueUrls
from reminders.errors import RemindersError
from reminders.local import roles, stack
from reminders.local.moto_server import ACCOUNT
from reminders.local.synth import LOCAL_RESOURCES
from reminders.local.twin import metrics as twin_metrics
from reminders.local.twin import resources
from reminders.local.twin.assets import FunctionAssets, build_assets
from reminders.local.twin.async_invoke import (
    AsyncConfig,
    AsyncEvent,
    AsyncEvents,
    Caller,
    InvokeEndpoint,
    RunResult,
    Served,
)
from reminders.local.twin.functions import FunctionSpec, function_specs
from reminders.local.twin.instances import (
    FunctionFailed,
    FunctionPool,
    InstanceError,
    lambda_environment,
)
from reminders.local.twin.poller import Poller
from reminders.local.twin.references import REF, LocalValues, queue_values, values_by_name
from reminders.local.twin.watch import SimulatedAges
from reminders.queue import Queue

# The functions the twin runs: the rule's, the mappings' and the custom resource's; and the
# publisher the scanner invokes, when the template has one (twin_functions).
TWIN_FUNCTIONS = ("scanner", "consumer", "redrive", "migrate")
# Instances of one function at most, and so batches of one mapping in flight at most: the
# template allows 36 consumers, which one shared machine cannot hold as processes.
LOCAL_CONCURRENCY = 2
WORK_PASSES = 50  # consumer-then-redrive passes of one work() call at most
RESPONSE_WAIT_SECONDS = 10.0


class TwinError(RemindersError):
    """The twin could not run what the template declares; the message names the resource and
    the property where the template is at fault."""


def publisher_of(template: Any) -> tuple[str, str] | None:
    """The publisher function's logical id and deployed name (its FunctionName, else the
    stack's name and logical id, as FunctionSpec.deployed_name), or None when the template
    has none (the variant whose scanner publishes itself)."""
    for logical_id, resource in template.get("Resources", {}).items():
        if LOCAL_RESOURCES["publisher"].match(logical_id) and \
                resource.get("Type") == resources.FUNCTION:
            name = (resource.get("Properties") or {}).get("FunctionName")
            return logical_id, name if isinstance(name, str) else f"Reminders-{logical_id}"
    return None


def twin_functions(template: Any) -> tuple[str, ...]:
    return (*TWIN_FUNCTIONS, "publisher") if publisher_of(template) else TWIN_FUNCTIONS


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{stack.REGION}:{ACCOUNT}:function:{name}"


def session_arn(role_arn: str, session: str) -> str:
    """The assumed role's ARN a role's session calls as (STS's AssumedRoleUser)."""
    account, _, path = role_arn.removeprefix("arn:aws:iam::").partition(":role/")
    return f"arn:aws:sts::{account}:assumed-role/{path.rsplit('/', 1)[-1]}/{session}"


def database_secret(endpoint: str, name: str, username: str, password: str) -> str:
    """A secret in the moto server at ``endpoint`` holding a database login, as RDS's secrets
    hold it; its ARN."""
    arn: str = stack.aws_client("secretsmanager", endpoint).create_secret(
        Name=name, SecretString=json.dumps({"username": username, "password": password}))["ARN"]
    return arn


def scheduled_event(at: datetime, rule_arn: str) -> dict[str, Any]:
    """What a schedule rule sends its target."""
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event",
            "source": "aws.events", "account": ACCOUNT, "time": iso(at).replace(".000", ""),
            "region": stack.REGION, "resources": [rule_arn], "detail": {}}


class ResponseCatcher:
    """The ``ResponseURL`` of the custom resource's events: keeps the body of each PUT."""

    def __init__(self) -> None:
        self.responses: dict[str, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with catcher._arrived:
                    catcher.responses[self.path.lstrip("/")] = json.loads(body or b"{}")
                    catcher._arrived.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, key: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{key}"

    def wait(self, key: str, seconds: float) -> dict[str, Any] | None:
        with self._arrived:
            self._arrived.wait_for(lambda: key in self.responses, seconds)
            return self.responses.get(key)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Twin:
    """The template's functions, queues, mappings, rule and custom resource on the local
    stack. ``database_url``: the pooled URL of the database the functions use (its user is the
    master login); ``prefix`` names the queues; ``clock`` is the one clock, its file read by
    every function's process."""

    template: Any
    endpoint_url: str
    database_url: str
    prefix: str
    # The one clock: a SharedClock's file is read by every function's process; any other clock
    # (the wall clock of `reminders tick` on a running stack) is each process's own.
    clock: Clock
    log_dir: Path
    secrets_key_arn: str = ""
    visibility_timeout_override: int | None = 2
    max_receive_count_override: int | None = None
    # What differs on one machine from the template's settings, besides the endpoint, the
    # pooler's port and the database's name: the webhook receiver listens on 127.0.0.1, which
    # the deployed consumer refuses.
    extra_env: Mapping[str, str] = field(
        default_factory=lambda: {"REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"})
    assets: FunctionAssets | None = None
    concurrency: int = LOCAL_CONCURRENCY
    # More instances of one function than ``concurrency`` (the racing-scanners drill invokes
    # four scanners at once, as overlapping rule firings would).
    instances: Mapping[str, int] = field(default_factory=dict)
    # The clock is simulated (it runs minutes while the wall clock runs seconds): a queue's
    # age is then measured on it (reminders.local.twin.watch.SimulatedAges), not on moto's.
    simulated: bool = True
    # Sample the queues at each rule firing (:meth:`tick`); off where the caller samples them
    # itself (reminders.local.twin.watch, once a command).
    samples_queues: bool = True
    state_file: Path | None = None  # where the custom resource's last properties are kept
    metrics: twin_metrics.MetricStore = field(default_factory=twin_metrics.MetricStore)
    plan: resources.TwinPlan | None = None
    urls: QueueUrls | None = None
    queues: dict[str, resources.LocalQueue] = field(default_factory=dict)
    specs: dict[str, FunctionSpec] = field(default_factory=dict)
    pools: dict[str, FunctionPool] = field(default_factory=dict)
    pollers: dict[str, Poller] = field(default_factory=dict)
    migrations_response: dict[str, Any] | None = None
    _log_offsets: dict[Path, int] = field(default_factory=dict)
    _log_lock: threading.Lock = field(default_factory=threading.Lock)
    _catcher: ResponseCatcher | None = None
    _ages: SimulatedAges | None = None  # on a simulated clock
    init_problems: list[str] = field(default_factory=list)  # "<logical id> <property>: ..."
    # The application login the migrations create and the functions read (user, password);
    # a fresh one each start when None.
    app_login: tuple[str, str] | None = None
    # The application secret's name, kept from one start to the next when it holds
    # ``app_login`` (so the custom resource's properties, which name it, stay the same and
    # CloudFormation would send no event); a fresh secret each start when None.
    app_secret_name: str | None = None
    async_events: AsyncEvents | None = None  # the publisher's queued events (with a fan-out)
    invoke_endpoint: InvokeEndpoint | None = None
    _roles: dict[str, roles.FunctionRole] = field(default_factory=dict)

    # ------------------------------------------------------------------ start and stop

    def start(self) -> Twin:
        """Create everything and run the custom resource's event; raise a TemplateError naming
        the resource and property the template got wrong, or TwinError."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        plan = self.plan = resources.read_plan(self.template)
        sqs = stack.aws_client("sqs", self.endpoint_url)
        self.queues = resources.create_queues(
            plan, sqs, self.prefix, visibility_timeout_override=self.visibility_timeout_override,
            max_receive_count_override=self.max_receive_count_override)
        self.urls = QueueUrls(*(resources.local_name(self.queues, name).url
                                for name in ("deliveries", "dlq", "parking")))
        login = conninfo_to_dict(self.database_url)
        tag = uuid.uuid4().hex[:8]
        master_arn = database_secret(self.endpoint_url, f"{self.prefix}-master-{tag}",
                                     str(login.get("user") or "postgres"),
                                     str(login.get("password") or ""))
        self.app_login = self.app_login or (f"twin_app_{tag}", secrets.token_urlsafe(24))
        app_arn = self._kept_secret() or database_secret(
            self.endpoint_url, self.app_secret_name or f"{self.prefix}-app-{tag}",
            *self.app_login)
        local = self._local_values(master_arn, app_arn)
        functions = twin_functions(self.template)
        self.specs = function_specs(self.template, local, only=functions)
        publisher = publisher_of(self.template)
        place = roles.Place(region=stack.REGION, account=ACCOUNT, arns={
            **{name: resources.local_name(self.queues, name).arn
               for name in ("deliveries", "dlq", "parking")},
            "secrets_key": self.secrets_key_arn, "app_secret": app_arn,
            "master_secret": master_arn,
            **({"publisher": function_arn(publisher[1])} if publisher else {})})
        admin_arn = stack.aws_client("sts", self.endpoint_url).get_caller_identity()["Arn"]
        made = self._roles = roles.create_roles(
            stack.aws_client("iam", self.endpoint_url), stack.aws_client("sts", self.endpoint_url),
            self.template, place, admin_arn, functions=functions, prefix=self.prefix)
        if publisher is not None:
            self._start_async_invokes(plan, made)
        assets = self.assets = self.assets or build_assets()
        settings = self._local_settings()
        for name, spec in self.specs.items():
            env = lambda_environment(spec, assets, region=stack.REGION,
                                     credentials=made[name].credentials, extra=settings)
            self.pools[name] = FunctionPool(spec, assets, env, self.log_dir, stack.REGION,
                                            ACCOUNT, max_instances=self.instances.get(
                                                name, self.concurrency))
        by_logical_id = {spec.logical_id: name for name, spec in self.specs.items()}
        for mapping in plan.pollers:
            found = by_logical_id.get(mapping.function)
            queue = self.queues.get(mapping.queue)
            if found is None or queue is None:
                raise TwinError(f"{mapping.logical_id}: FunctionName or EventSourceArn names "
                                f"{mapping.function} / {mapping.queue}, which the twin does "
                                "not run")
            name = found
            self.pollers[name] = Poller(
                mapping, Queue(stack.service_client("sqs", self.endpoint_url,
                                                    credentials=made[name].credentials),
                               queue.url),
                self._invoker(name), region=stack.REGION, queue_arn=queue.arn,
                max_concurrency=self.concurrency)
        for name in ("consumer", "redrive"):
            if name not in self.pollers:
                raise TwinError(f"the template has no AWS::Lambda::EventSourceMapping for the "
                                f"{name} function ({self.specs[name].logical_id})")
        rule = plan.schedule()
        if not rule.targets or rule.targets[0].function != self.specs["scanner"].logical_id:
            raise TwinError(f"{rule.logical_id}: Targets does not name the scanner "
                            f"({self.specs['scanner'].logical_id})")
        self.run_migrations()

    def _kept_secret(self) -> str | None:
        """The ARN of the secret named :attr:`app_secret_name` when it exists and holds
        :attr:`app_login`; else None (and the name is freed for a new one)."""
        if self.app_secret_name is None or self.app_login is None:
            return None
        client = stack.aws_client("secretsmanager", self.endpoint_url)
        try:
            found = client.get_secret_value(SecretId=self.app_secret_name)
        except client.exceptions.ResourceNotFoundException:
            return None
        saved = json.loads(found["SecretString"])
        if (saved.get("username"), saved.get("password")) == self.app_login:
            arn: str = found["ARN"]
            return arn
        client.delete_secret(SecretId=self.app_secret_name, ForceDeleteWithoutRecovery=True)
        return None

    def _local_values(self, master_arn: str, app_arn: str) -> LocalValues:
        host = str(conninfo_to_dict(self.database_url).get("host") or "127.0.0.1")
        publisher = publisher_of(self.template)
        return LocalValues(stack.REGION, ACCOUNT, values_by_name(self.template, {
            **{name: queue_values(resources.local_name(self.queues, name).url, stack.REGION,
                                  ACCOUNT) for name in ("deliveries", "dlq", "parking")},
            "proxy": {"Endpoint": host},
            "app_secret": {REF: app_arn},
            "master_secret": {REF: master_arn},
            **({"publisher": {REF: publisher[1], "Arn": function_arn(publisher[1])}}
               if publisher else {})}))

    def _start_async_invokes(self, plan: resources.TwinPlan,
                             made: Mapping[str, roles.FunctionRole]) -> None:
        """The Lambda Invoke endpoint the functions call (the scanner, its publisher) and the
        queue of asynchronous events, each function's EventInvokeConfig read from the plan."""
        by_logical_id = {spec.logical_id: name for name, spec in self.specs.items()}
        configs: dict[str, AsyncConfig] = {}
        for logical_id, config in plan.invoke_configs.items():
            name = by_logical_id.get(logical_id)
            if name is None:
                continue
            if config.qualifier != "$LATEST":
                raise TwinError(f"{config.logical_id}: Qualifier {config.qualifier!r} names a "
                                "version or alias, which the twin does not publish")
            on_failure = self.queues[config.on_failure].url if config.on_failure else None
            configs[name] = AsyncConfig(config.maximum_retry_attempts,
                                        config.maximum_event_age, on_failure)
        names = {name: spec.deployed_name() for name, spec in self.specs.items()}
        self.async_events = AsyncEvents(
            self._run_event, configs, self.clock.now, received=self._async_received,
            dropped=self._async_dropped, send_failure=self._send_to_destination,
            function_arn=lambda name: function_arn(names[name]))
        self.invoke_endpoint = InvokeEndpoint(
            {deployed: Served(name, deployed) for name, deployed in names.items()},
            self.async_events, region=stack.REGION, account=ACCOUNT, run_sync=self._run_event)
        for name, role in made.items():
            self.invoke_endpoint.add_caller(Caller(
                role.credentials.access_key, role.credentials.secret_key,
                role.credentials.token, session_arn(role.arn, name), role.document))

    def _local_settings(self) -> dict[str, str]:
        login = conninfo_to_dict(self.database_url)
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "REMINDERS_DB_PORT": str(login["port"]),
                "REMINDERS_DB_NAME": str(login["dbname"]), "REMINDERS_DB_SSLMODE": "disable",
                "REMINDERS_REFILL_PATIENCE_SECONDS": "0",
                **({"REMINDERS_CLOCK_FILE": self.clock.path}
                   if isinstance(self.clock, SharedClock) else {}),
                **({"AWS_ENDPOINT_URL_LAMBDA": self.invoke_endpoint.url}
                   if self.invoke_endpoint is not None else {}),
                **self.extra_env}

    def alarm_board(self) -> Any:
        """A board of the template's alarms reading this twin's metrics, with the functions'
        and queues' names on this machine (reminders.local.twin.board)."""
        from reminders.local.twin.board import board_for

        return board_for(self.template, self.metrics, self.alarm_names())

    def alarm_names(self) -> Any:
        """The FunctionName and QueueName values this twin's metrics carry, by logical id
        (reminders.local.twin.alarms.LocalNames)."""
        from reminders.local.twin.alarms import LocalNames

        # Functions the twin does not run (the operations and rotation functions) get a
        # name of their own: nothing emits for them, so their alarms stay quiet.
        functions = {logical_id: f"Reminders-{logical_id}" for logical_id, resource
                     in self.template["Resources"].items()
                     if resource.get("Type") == "AWS::Lambda::Function"}
        functions.update({spec.logical_id: spec.deployed_name()
                          for spec in self.specs.values()})
        return LocalNames(functions=functions, queues={
            logical_id: queue.name for logical_id, queue in self.queues.items()})

    def require_urls(self) -> QueueUrls:
        if self.urls is None:
            raise TwinError("the twin is not started")
        return self.urls

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        if self._catcher is not None:
            self._catcher.close()
            self._catcher = None
        if self.invoke_endpoint is not None:
            self.invoke_endpoint.close()
            self.invoke_endpoint = None

    def __enter__(self) -> Twin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ invocations

    def _invoker(self, name: str) -> Callable[[dict[str, Any]], Any]:
        def invoke(event: dict[str, Any]) -> Any:
            result = self.invoke(name, event)
            result.raise_for_error()
            return result.json()

        return invoke

    def invoke(self, name: str, event: Any) -> Any:
        """One synchronous invocation of function ``name``; its Lambda metrics and EMF lines
        go to :attr:`metrics`, stamped with the clock's instant at the call."""
        at = self.clock.now()
        result = self.pools[name].invoke(event)
        twin_metrics.record_invocation(
            self.metrics, self.specs[name].deployed_name(), at,
            duration_ms=result.duration_seconds * 1000, error=not result.ok)
        self._feed_logs(at)
        if result.problem:  # an init failure: the template's property is at fault
            self.init_problems.append(result.problem)
            for poller in self.pollers.values():
                poller.stopped.set()
            raise FunctionFailed(result)
        return result

    def _feed_logs(self, at: datetime) -> None:
        """The EMF records the functions printed since the last look."""
        with self._log_lock:
            for path in sorted(self.log_dir.glob("*.log")):
                offset = self._log_offsets.get(path, 0)
                with path.open("rb") as log:
                    log.seek(offset)
                    chunk = log.read()
                complete = chunk[:chunk.rfind(b"\n") + 1]
                self._log_offsets[path] = offset + len(complete)
                for line in complete.decode(errors="replace").splitlines():
                    try:
                        twin_metrics.feed_emf(self.metrics, line, at)
                    except twin_metrics.EmfError:
                        continue  # a malformed record is the emitter's test's concern

    def tick(self) -> dict[str, Any]:
        """One firing of the schedule rule at the clock's instant: the scanner invoked as the
        rule's target invokes it (asynchronously: up to 1 + the smaller of the target's and the
        invoke config's MaximumRetryAttempts tries, each within the maximum event ages), and
        the queues' figures sampled for this minute. Returns the scanner's answer, or
        ``{"error": ...}`` once the event is dropped."""
        assert self.plan is not None
        at = self.clock.now()
        if self.samples_queues:
            self.sample_queues(at)
        rule = self.plan.schedule()
        target = rule.targets[0]
        scanner = self.specs["scanner"]
        config = self.plan.invoke_configs.get(scanner.logical_id)
        retries = min(target.maximum_retry_attempts,
                      config.maximum_retry_attempts if config else 2)
        max_age = min(target.maximum_event_age, config.maximum_event_age if config else 21_600)
        event = scheduled_event(at, f"arn:aws:events:{stack.REGION}:{ACCOUNT}:rule/"
                                    f"{rule.logical_id}")
        sent = time.monotonic()
        error: dict[str, Any] | None = None
        for _ in range(1 + retries):
            if time.monotonic() - sent > max_age:
                break
            result = self.invoke("scanner", event)
            # What the scanner invoked asynchronously runs now, whether or not it then failed.
            self.run_async_events()
            if result.ok:
                answer: dict[str, Any] = result.json()
                return answer
            error = result.error
        twin_metrics.record_async_dropped(self.metrics, scanner.deployed_name(), at)
        return {"error": error}

    # ------------------------------------------------------------------ asynchronous invokes

    def run_async_events(self, *, max_attempts: int = 1000) -> list[AsyncEvent]:
        """Run the queued asynchronous events whose turn has come at the clock's instant (a
        first attempt, or a retry whose wait is over; an event past its maximum age is
        dropped); the events that ended. Nothing without a publisher."""
        if self.async_events is None:
            return []
        return self.async_events.run_due(max_attempts=max_attempts)

    def _run_event(self, name: str, payload: bytes) -> RunResult:
        """One attempt of function ``name`` with an accepted event's payload."""
        at = self.clock.now()
        try:
            result = self.invoke(name, json.loads(payload))
        except FunctionFailed as exc:  # its init failed: Lambda retries it as an error
            return RunResult(str(exc), response=exc.result.payload)
        except InstanceError as exc:  # no instance free: throttled, it did not run
            twin_metrics.record_invocation(self.metrics, self.specs[name].deployed_name(), at,
                                           duration_ms=0, error=False, throttled=True)
            return RunResult(str(exc), throttled=True)
        error = result.error
        return RunResult(None if error is None else
                         f"{error.get('errorType')}: {error.get('errorMessage')}",
                         response=result.payload)

    def _async_received(self, event: AsyncEvent) -> None:
        twin_metrics.record_async_received(self.metrics, self.specs[event.function]
                                           .deployed_name(), event.received)

    def _async_dropped(self, event: AsyncEvent, at: datetime) -> None:
        twin_metrics.record_async_dropped(self.metrics, self.specs[event.function]
                                          .deployed_name(), at)

    def _send_to_destination(self, event: AsyncEvent, url: str,
                             record: Mapping[str, Any]) -> None:
        """Lambda sends the record as the function's role: one that is not granted
        sqs:SendMessage on the destination loses it (raises, kept on the event)."""
        sqs = stack.service_client("sqs", self.endpoint_url,
                                   credentials=self._roles[event.function].credentials)
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))

    def sample_queues(self, at: datetime) -> None:
        """The queues' figures for the minute of ``at``. On a simulated clock a message's age
        is measured on it: a message counts as sent at the first sample after moto stamped it
        (reminders.local.twin.watch.SimulatedAges), so one left for twelve simulated minutes
        is 720 s old, as SQS would report it."""
        sqs = stack.aws_client("sqs", self.endpoint_url)
        queues = {q.name: q.url for q in self.queues.values()}
        stamps = twin_metrics.oldest_sent(self.endpoint_url)
        if not self.simulated:
            twin_metrics.sample_queues(self.metrics, sqs, queues, at, oldest=stamps,
                                       now_ms=int(time.time() * 1000))
            return
        ages = self._ages = self._ages or SimulatedAges()
        ages.mark(at)
        oldest = {name: None if stamps.get(name) is None else ages.sent_at(int(stamps[name] or 0))
                  for name in queues}
        twin_metrics.sample_queues(self.metrics, sqs, queues, at, oldest=oldest,
                                   now_ms=int(at.timestamp() * 1000))

    def work(self, *, max_seconds: float = 60.0, max_rounds: int = 10_000) -> dict[str, Any]:
        """The consumer's and the redrive function's mappings polled until both queues are
        empty (bounded by ``max_seconds`` and ``max_rounds`` batches a mapping); the summary
        ``reminders.local.pipeline.work`` gives."""
        consumer, redrive = self.pollers["consumer"], self.pollers["redrive"]
        deadline = time.monotonic() + max_seconds
        idle = False
        for _ in range(WORK_PASSES):
            # A mapping whose queue holds nothing (visible, in flight or delayed) has nothing
            # to receive: it is not polled (which would wait out its batching window).
            depths = consumer.queue.depth(), redrive.queue.depth()
            if depths == (0, 0):
                idle = True
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if depths[0]:
                consumer.run(max_rounds=max_rounds, max_seconds=left)
            redrive.run(max_rounds=max_rounds, max_seconds=max(0.0, deadline - time.monotonic()))
        if self.init_problems:  # a function that cannot start fails every batch: say why
            raise TwinError(self.init_problems[0])
        return {"idle": idle, "consumer": consumer.counts.as_json(),
                "redrive": redrive.counts.as_json(),
                "failed_records": consumer.counts.failures + redrive.counts.failures,
                "invocation_errors": consumer.counts.errors + redrive.counts.errors}

    def run(self, *, max_seconds: float = 60.0) -> dict[str, Any]:
        """One tick and the work it makes (``reminders.local.pipeline.run`` on the twin)."""
        return {"tick": self.tick(), "work": self.work(max_seconds=max_seconds)}

    # ------------------------------------------------------------------ the custom resource

    def run_migrations(self) -> dict[str, Any] | None:
        """The migrations custom resource's event, as CloudFormation sends it: Create the first
        time on this database, Update (with OldResourceProperties) when its properties changed
        since, nothing when they did not. Raises TwinError when the function answers FAILED."""
        assert self.plan is not None
        spec = self.plan.migrations
        if spec is None:
            return None
        properties = self._custom_properties(spec)
        state = self._custom_state()
        key = f"{conninfo_to_dict(self.database_url)['dbname']}"
        old = state.get(key)
        if old is not None and old["properties"] == properties:
            return None
        request_id = str(uuid.uuid4())
        catcher = self._catcher = self._catcher or ResponseCatcher()
        event: dict[str, Any] = {
            "RequestType": "Create" if old is None else "Update",
            "ServiceToken": properties["ServiceToken"],
            "ResponseURL": catcher.url(request_id),
            "StackId": f"arn:aws:cloudformation:{stack.REGION}:{ACCOUNT}:stack/Reminders/"
                       f"{uuid.uuid5(uuid.NAMESPACE_URL, self.prefix)}",
            "RequestId": request_id,
            "LogicalResourceId": spec.logical_id,
            "ResourceType": spec.resource_type,
            "ResourceProperties": properties,
        }
        if old is not None:
            event["PhysicalResourceId"] = old["physical_id"]
            event["OldResourceProperties"] = old["properties"]
        self.framework(event)
        response = catcher.wait(request_id, RESPONSE_WAIT_SECONDS)
        if response is None or response.get("Status") != "SUCCESS":
            reason = (response or {}).get("Reason", "no response arrived")
            raise TwinError(f"{spec.logical_id}: {event['RequestType']} failed: {reason}")
        self.migrations_response = response
        state[key] = {"properties": properties, "physical_id": response["PhysicalResourceId"]}
        if self.state_file is not None:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            self.state_file.write_text(json.dumps(state, indent=2))
        return response

    def framework(self, event: dict[str, Any]) -> None:
        """What the Provider framework's function does with an event: invoke ``onEvent`` with
        it, then PUT the CloudFormation response to its ResponseURL."""
        result = self.invoke("migrate", event)
        answer = result.json() if result.ok else {}
        body = {"Status": "SUCCESS" if result.ok else "FAILED",
                "Reason": "" if result.ok else
                f"{(result.error or {}).get('errorType')}: "
                f"{(result.error or {}).get('errorMessage')}",
                "PhysicalResourceId": answer.get("PhysicalResourceId")
                or event.get("PhysicalResourceId") or event["RequestId"],
                "StackId": event["StackId"], "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"],
                "Data": answer.get("Data", {})}
        data = json.dumps(body).encode()
        request = urllib.request.Request(event["ResponseURL"], data=data, method="PUT",
                                         headers={"Content-Type": ""})
        with urllib.request.urlopen(request, timeout=10):
            pass

    def _custom_properties(self, spec: resources.CustomResourceSpec) -> dict[str, Any]:
        """ResourceProperties as CloudFormation sends them: every value a string, references
        resolved, the ServiceToken the framework function's ARN; the app login's secret is
        this twin's."""
        from reminders.local.twin.references import resolve

        local = LocalValues(stack.REGION, ACCOUNT, values_by_name(self.template, {
            "app_secret": {REF: self._app_secret_arn()}}))
        given = {k: v for k, v in spec.properties.items() if k != "ServiceToken"}
        resolved = {k: str(resolve(v, local, f"{spec.logical_id} {k}"))
                    for k, v in given.items()}
        token = (f"arn:aws:lambda:{stack.REGION}:{ACCOUNT}:function:"
                 f"Reminders-{spec.service_token}")
        return {"ServiceToken": token, **resolved}

    def _app_secret_arn(self) -> str:
        return self.specs["consumer"].environment["REMINDERS_DB_SECRET_ARN"]

    def _custom_state(self) -> dict[str, Any]:
        if self.state_file is None or not self.state_file.exists():
            return {}
        found: dict[str, Any] = json.loads(self.state_file.read_text())
        return found
