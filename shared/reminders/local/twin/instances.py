"""Function instances: each one process running the real runtime interface client
(``python3.13 -m awslambdaric <Handler>``) against a Runtime API endpoint of its own, with
the function's ``Timeout`` and ``MemorySize`` enforced as Lambda enforces them.

- The process sees only its assets: cwd and the first entry of its path is the task folder
  (the code asset), then the layer's ``python/`` (/opt/python) and the runtime folder
  (/var/runtime). Its environment is built from nothing: the template's variables (resolved),
  Lambda's own, the role's credentials and what the caller adds. ``-s -S`` keep the
  interpreter's own site-packages off the path, so nothing installed beside CPython (or in a
  virtualenv) is importable; PYTHONPATH is the one variable of Python's it gets (``-E`` would
  ignore it, and Lambda's bootstrap sets it too).
- **Timeout**: an invocation still running at its deadline is killed with its process; the
  caller gets ``Task timed out after N.NN seconds`` and the next invocation starts a new
  process (a cold start).
- **MemorySize**: the process's resident memory is sampled from /proc while it initialises
  and runs; over the limit it is killed and reported as Lambda reports it
  (``Runtime.OutOfMemory``, ``Runtime exited with error: signal: killed``). (RLIMIT_AS would
  count the address space threads reserve, not memory used.)
- **Init**: a failure while loading the handler comes back naming the function's logical id and
  the property to look at (``Handler`` for a handler that cannot be found, ``Environment``
  for a setting refused at cold start, ``Layers`` for a module in no asset, ``Code`` for the
  rest) with the client's errorType and errorMessage. Init is bounded by Lambda's 10 s.

A :class:`FunctionPool` keeps up to a given number of warm instances of one function and
hands each invocation to an idle one, starting one when none is idle and the limit allows.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from reminders.aws_http import Credentials
from reminders.errors import RemindersError
from reminders.local.twin.assets import FunctionAssets
from reminders.local.twin.functions import RESERVED_VARIABLES, FunctionSpec
from reminders.local.twin.runtime_api import Invocation, RuntimeApi, RuntimeEvent

INIT_TIMEOUT_SECONDS = 10.0  # Lambda's limit on a function's initialisation
SAMPLE_SECONDS = 0.01  # how often a running instance's memory is looked at
STOP_SECONDS = 5.0
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# awslambdaric's errorTypes for a handler that cannot be loaded.
HANDLER_FAULTS = frozenset({"Runtime.ImportModuleError", "Runtime.HandlerNotFound",
                            "Runtime.MalformedHandlerName", "Runtime.UserCodeSyntaxError",
                            "Runtime.BuiltInModuleConflict"})
# The error a missing or malformed setting raises at cold start (reminders.config).
SETTINGS_FAULTS = frozenset({"ConfigError"})
_instances = itertools.count(1)


class InstanceError(RemindersError):
    """A function instance could not be started or had no room; the message says why."""


@dataclass(frozen=True)
class InvokeResult:
    """One invocation's outcome, as Lambda's Invoke reports it: ``payload`` (the response, or
    the error document when ``error`` is set), whether it was a cold start, and its figures."""

    function: str
    request_id: str
    payload: bytes
    error: dict[str, Any] | None = None
    cold: bool = False
    init_seconds: float = 0.0
    duration_seconds: float = 0.0
    max_memory_mib: float = 0.0
    problem: str = ""  # for an init failure: "<logical id> <property>: <type>: <message>"
    pid: int | None = None  # the instance's process

    @property
    def ok(self) -> bool:
        return self.error is None

    def json(self) -> Any:
        return json.loads(self.payload or b"null")

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise FunctionFailed(self)


class FunctionFailed(RemindersError):
    def __init__(self, result: InvokeResult) -> None:
        error = result.error or {}
        super().__init__(result.problem or f"{result.function}: {error.get('errorType')}: "
                                           f"{error.get('errorMessage')}")
        self.result = result


def lambda_environment(spec: FunctionSpec, assets: FunctionAssets, *, region: str,
                       credentials: Credentials, extra: Mapping[str, str] | None = None,
                       stack_name: str = "Reminders") -> dict[str, str]:
    """The whole environment of ``spec``'s process but the Runtime API's address: the
    template's variables, Lambda's own, the role's credentials and ``extra`` (the caller's:
    endpoint URLs of the local stand-ins, a setting that differs on one machine). ``extra``
    may not set what Lambda reserves."""
    reserved = sorted(set(extra or {}) & RESERVED_VARIABLES)
    if reserved:
        raise InstanceError(f"{spec.logical_id}: Lambda sets {', '.join(reserved)} itself")
    name = spec.deployed_name(stack_name)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
        "PYTHONPATH": os.pathsep.join(assets.python_path),
        # Lambda's file system is read-only: nothing is written beside the assets.
        "PYTHONDONTWRITEBYTECODE": "1",
        "LAMBDA_TASK_ROOT": str(assets.code),
        "LAMBDA_RUNTIME_DIR": str(assets.runtime),
        "_HANDLER": spec.handler,
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mib),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        **({"AWS_SESSION_TOKEN": credentials.token} if credentials.token else {}),
        **({"AWS_LAMBDA_LOG_FORMAT": "JSON"} if spec.log_format == "JSON" else {}),
    }
    return {**env, **spec.environment, **(extra or {})}


class FunctionInstance:
    """One process of ``spec`` and its Runtime API endpoint; started by the first
    :meth:`invoke` (the cold start), kept warm after it until it dies or is stopped."""

    def __init__(self, spec: FunctionSpec, assets: FunctionAssets, environment: Mapping[str, str],
                 *, log_dir: Path, region: str, account: str) -> None:
        self.spec = spec
        self.assets = assets
        self.environment = dict(environment)
        self.region, self.account = region, account
        self.number = next(_instances)
        self.log_path = log_dir / f"{spec.name}-{self.number}.log"
        self._api: RuntimeApi | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._ready = False  # the runtime asked for its next invocation
        self.invoking = False  # initialised, and an invocation handed to it is under way
        self.dead = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        self._api = RuntimeApi()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        env = {**self.environment, "AWS_LAMBDA_RUNTIME_API": self._api.address,
               "AWS_LAMBDA_LOG_STREAM_NAME": f"{time.strftime('%Y/%m/%d')}/[$LATEST]"
                                             f"{uuid.uuid4().hex}"}
        try:
            self._process = subprocess.Popen(
                [self.assets.python, "-s", "-S", "-m", "awslambdaric", self.spec.handler],
                cwd=self.assets.code, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.stop()
            raise InstanceError(f"{self.spec.logical_id}: could not start "
                                f"{self.assets.python}: {exc}") from None

    def invoke(self, payload: bytes) -> InvokeResult:
        """Run one invocation (starting the process first if this is its cold start)."""
        if self.dead:
            raise InstanceError(f"{self.spec.logical_id}: instance {self.number} is stopped")
        request_id = str(uuid.uuid4())
        cold = self._process is None
        started = time.monotonic()
        peak = 0.0
        if cold:
            self._start()
        api, process = self._api, self._process
        if api is None or process is None:
            raise InstanceError(f"{self.spec.logical_id}: instance {self.number} is stopped")
        init_seconds = 0.0
        while not self._ready:  # initialising: bounded by Lambda's init limit
            event, peak, ended = self._watch(api, process, peak,
                                             started + INIT_TIMEOUT_SECONDS)
            if event is not None and event.kind == "next":
                self._ready = True
            elif event is not None and event.kind == "init_error":
                self.stop()
                return self._init_failure(request_id, event.error(), started, peak)
            elif ended is not None:
                if ended == "timeout":
                    ended = f"Init timed out after {INIT_TIMEOUT_SECONDS:.2f} seconds"
                    error = {"errorType": "Runtime.InitTimeout",
                             "errorMessage": f"RequestId: {request_id} Error: {ended}"}
                else:
                    error = self._exit_error(request_id, ended)
                return self._init_failure(request_id, error, started, peak)
        if cold:
            init_seconds = time.monotonic() - started
        invoked = time.monotonic()
        deadline = invoked + self.spec.timeout_seconds
        self._ready = False
        self.invoking = True
        api.offer(Invocation(
            request_id=request_id, payload=payload,
            deadline_ms=int((time.time() + self.spec.timeout_seconds) * 1000),
            function_arn=f"arn:aws:lambda:{self.region}:{self.account}:function:"
                         f"{self.environment['AWS_LAMBDA_FUNCTION_NAME']}",
            trace_id=f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Sampled=0"))
        try:
            return self._await(api, process, request_id, cold, init_seconds, invoked, deadline,
                               peak)
        finally:
            self.invoking = False

    def _await(self, api: RuntimeApi, process: subprocess.Popen[bytes], request_id: str,
               cold: bool, init_seconds: float, invoked: float, deadline: float,
               peak: float) -> InvokeResult:
        """The invocation's response, error, or the end of its process."""
        while True:
            event, peak, ended = self._watch(api, process, peak, deadline)
            figures: dict[str, Any] = {
                "cold": cold, "init_seconds": init_seconds, "pid": process.pid,
                "duration_seconds": time.monotonic() - invoked, "max_memory_mib": peak}
            if event is not None and event.kind == "response" and event.request_id == request_id:
                return InvokeResult(self.spec.name, request_id, event.body, **figures)
            if event is not None and event.kind == "error" and event.request_id == request_id:
                error = event.error()
                return InvokeResult(self.spec.name, request_id, json.dumps(error).encode(),
                                    error, **figures)
            if ended is not None:
                if ended == "timeout":
                    message = f"Task timed out after {self.spec.timeout_seconds:.2f} seconds"
                    error = {"errorType": "Sandbox.Timedout",
                             "errorMessage": f"RequestId: {request_id} Error: {message}"}
                else:
                    error = self._exit_error(request_id, ended)
                return InvokeResult(self.spec.name, request_id, json.dumps(error).encode(),
                                    error, **figures)

    def _watch(self, api: RuntimeApi, process: subprocess.Popen[bytes], peak: float,
               deadline: float) -> tuple[RuntimeEvent | None, float, str | None]:
        """One look: the runtime's next event (waiting a sample's time), the peak memory, and
        why the instance ended if it did (``timeout``, ``oom``, or its exit status) - in
        which case its process is gone."""
        event = api.next_event(SAMPLE_SECONDS)
        resident = resident_mib(process.pid)
        peak = max(peak, resident)
        if event is not None:
            return event, peak, None
        code = process.poll()
        if code is not None:
            self.stop()
            return None, peak, f"exit:{code}"
        if resident > self.spec.memory_mib:
            self.stop()
            return None, peak, "oom"
        if time.monotonic() >= deadline:
            self.stop()
            return None, peak, "timeout"
        return None, peak, None

    def _exit_error(self, request_id: str, ended: str) -> dict[str, Any]:
        if ended == "oom":
            return {"errorType": "Runtime.OutOfMemory",
                    "errorMessage": f"RequestId: {request_id} Error: Runtime exited with "
                                    "error: signal: killed"}
        code = int(ended.removeprefix("exit:"))
        how = f"signal: {signal.Signals(-code).name.removeprefix('SIG').lower()}" \
            if code < 0 else f"exit status {code}"
        return {"errorType": "Runtime.ExitError",
                "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: "
                                f"{how}"}

    def _init_failure(self, request_id: str, error: dict[str, Any], started: float,
                      peak: float) -> InvokeResult:
        prop = init_property(error, self.spec.handler, self.assets.code)
        problem = (f"{self.spec.logical_id} {prop}: {error.get('errorType')}: "
                   f"{error.get('errorMessage')}")
        return InvokeResult(self.spec.name, request_id, json.dumps(error).encode(), error,
                            cold=True, init_seconds=time.monotonic() - started,
                            max_memory_mib=peak, problem=problem, pid=self.pid)

    def stop(self) -> None:
        """Kill the process (and anything it started) and close its endpoint."""
        self.dead = True
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):  # its session: it and its children
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_SECONDS)
            self._process = process  # keeps pid/poll answering for the caller
        if self._api is not None:
            self._api.abandon()
            self._api.close()
            self._api = None
        if self._log is not None:
            self._log.close()
            self._log = None


def resident_mib(pid: int) -> float:
    """The resident memory of process ``pid`` in MiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def init_property(error: Mapping[str, Any], handler: str, code: Path) -> str:
    """Which property of the function an init failure points at: ``Handler`` when the
    handler's own module or function cannot be found, ``Layers`` when a module it imports is
    in neither the code asset nor a layer, ``Environment`` for a setting refused at cold
    start, ``Code`` for anything else the code raised while loading."""
    kind = str(error.get("errorType", ""))
    if kind == "Runtime.ImportModuleError":
        missing = re.search(r"No module named '([^']+)'", str(error.get("errorMessage", "")))
        module = handler.rsplit(".", 1)[0]
        if missing and not (module + ".").startswith(missing.group(1) + "."):
            top = missing.group(1).split(".")[0]
            found_in_code = (code / top).is_dir() or (code / f"{top}.py").is_file()
            return "Code" if found_in_code else "Layers"
        return "Handler"
    if kind in HANDLER_FAULTS:
        return "Handler"
    if kind in SETTINGS_FAULTS:
        return "Environment"
    return "Code"


@dataclass
class FunctionPool:
    """Up to ``max_instances`` instances of one function, each a process of its own, kept warm
    between invocations and stopped by :meth:`close`. Thread-safe: each invocation gets an
    instance to itself; an invocation that finds none idle and no room waits up to
    ``wait_seconds`` and then fails (as Lambda throttles)."""

    spec: FunctionSpec
    assets: FunctionAssets
    environment: Mapping[str, str]
    log_dir: Path
    region: str
    account: str
    max_instances: int = 1
    wait_seconds: float = 30.0
    _idle: list[FunctionInstance] = field(default_factory=list)
    _busy: set[FunctionInstance] = field(default_factory=set)
    _closed: bool = False
    pids_seen: set[int] = field(default_factory=set)  # every process an invocation ran in
    _room: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        if self.max_instances < 1:
            raise InstanceError(f"{self.spec.logical_id}: max_instances must be at least 1")

    def invoke(self, event: Any = None, *, payload: bytes | None = None) -> InvokeResult:
        """Invoke with ``event`` (JSON-encoded) or the raw ``payload``."""
        body = payload if payload is not None else json.dumps(event).encode()
        instance = self._acquire()
        try:
            return instance.invoke(body)
        finally:
            if instance.pid is not None:
                self.pids_seen.add(instance.pid)
            self._release(instance)

    def _acquire(self) -> FunctionInstance:
        until = time.monotonic() + self.wait_seconds
        with self._room:
            while True:
                if self._closed:
                    raise InstanceError(f"{self.spec.logical_id}: the pool is closed")
                if self._idle:
                    instance = self._idle.pop()
                    break
                if len(self._busy) < self.max_instances:
                    instance = FunctionInstance(self.spec, self.assets, self.environment,
                                                log_dir=self.log_dir, region=self.region,
                                                account=self.account)
                    break
                left = until - time.monotonic()
                if left <= 0:
                    raise InstanceError(
                        f"{self.spec.logical_id}: all {self.max_instances} instances busy for "
                        f"{self.wait_seconds:g} s (TooManyRequestsException)")
                self._room.wait(left)
            self._busy.add(instance)
            return instance

    def _release(self, instance: FunctionInstance) -> None:
        with self._room:
            self._busy.discard(instance)
            if instance.dead or self._closed:
                instance.stop()
            else:
                self._idle.append(instance)
            self._room.notify()

    @property
    def instances(self) -> int:
        with self._room:
            return len(self._idle) + len(self._busy)

    def busy_pids(self) -> list[int]:
        """The processes of the instances running an invocation now, past their init (what
        a drill kills)."""
        with self._room:
            return [pid for instance in self._busy
                    if instance.invoking and (pid := instance.pid) is not None]

    def close(self) -> None:
        """Stop every instance; one still running an invocation is killed (its caller gets
        the process's exit as the invocation's error)."""
        with self._room:
            self._closed = True
            every = [*self._idle, *self._busy]
            self._idle.clear()
            self._room.notify_all()
        for instance in every:
            instance.stop()

    def __enter__(self) -> FunctionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
