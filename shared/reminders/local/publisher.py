"""The publisher function on one machine. moto runs Lambda functions only in Docker, which is
not here, so :class:`InProcessInvoker` stands in for Lambda's asynchronous Invoke: it runs the
real publisher handler (``functions/publisher``) in this process with the payload decoded from
JSON, as Lambda would hand it over, and the handler sends through SQS (moto over HTTP).

What it keeps of Lambda's asynchronous semantics: an invoke that is refused raises before
anything runs; once accepted, the handler's failure never reaches the caller (Lambda would
have answered 202 already) and is retried up to ``retries`` times, as the function's
asynchronous configuration says. What it does not keep: the run happens before ``invoke``
returns (Lambda runs it later, in parallel), and retries follow at once, not after a minute
or two. Tests drive refusals, lost chunks and duplicated chunks through ``fault``.

The twin runs the publisher as Lambda does instead (reminders.local.twin.async_invoke): the
built function in a process of its own, invoked through a local Invoke endpoint that checks the
caller's signature and grant, its events retried after one and two minutes and dropped past
the maximum event age of the template's EventInvokeConfig, on the injected clock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from reminders import fanout
from reminders.lambdas import InvokeRefused
from reminders.local.event_source import LambdaContext

# What happens to one invoke: run (as Lambda does), refuse (the invoke is not queued), lose
# (queued, never run: every retry failed or the event aged out), twice (run, then run again
# as a retry after a failure that came after the sends), hold (queued, run only when
# ``run_held`` is called: a retry that comes late).
Fault = Literal["run", "refuse", "lose", "twice", "hold"]
ASYNC_RETRIES = 2  # Lambda's default, and what infra/constructs/functions.py sets


@dataclass
class InProcessInvoker:
    sender: fanout.ChunkSender
    fault: Callable[[int], Fault] = field(default=lambda _: "run")
    retries: int = ASYNC_RETRIES
    invokes: int = 0
    runs: int = 0
    failures: list[str] = field(default_factory=list)
    held: list[Any] = field(default_factory=list)
    function_name: str = "reminders-publisher"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, payload: bytes) -> None:
        with self._lock:
            self.invokes += 1
            fault = self.fault(self.invokes)
        if fault == "refuse":
            raise InvokeRefused(f"Invoke of {self.function_name} failed: TooManyRequests"
                                "Exception (the stand-in refused it)")
        if fault == "lose":
            return
        event = json.loads(payload)
        if fault == "hold":
            with self._lock:
                self.held.append(event)
            return
        for _ in range(2 if fault == "twice" else 1):
            self._run(event)

    def run_held(self) -> None:
        """Run the held events now, as Lambda's late retries would."""
        with self._lock:
            held, self.held = self.held, []
        for event in held:
            self._run(event)

    def _run(self, event: Any) -> None:
        """One accepted event: the handler, then Lambda's retries while it fails."""
        from functions.publisher.handler import handler

        fanout.install_sender(self.sender)
        for _ in range(1 + self.retries):
            with self._lock:
                self.runs += 1
            try:
                handler(event, LambdaContext(function_name=self.function_name))
                return
            except Exception as exc:  # noqa: BLE001 (Lambda records it and retries)
                self.failures.append(f"{type(exc).__name__}: {exc}")
