"""An event source mapping from the template (a :class:`PollerSpec`), run against moto's SQS.

As Lambda's SQS poller does: a batch is up to ``BatchSize`` records, gathered for up to
``MaximumBatchingWindowInSeconds`` (SQS gives at most ten a call, so a larger batch takes
several receives); at most ``MaximumConcurrency`` batches are in flight at once; with
``ReportBatchItemFailures`` the records the response names stay on the queue (an unreadable
response fails the whole batch), without it an invocation that raises returns the whole batch
and one that returns deletes it. What is not deleted comes back after the queue's visibility
timeout with SQS's receive count, and moto's redrive policy moves it to the dead-letter queue.

``invoke`` takes the SQS event and returns the function's response (raising for a function
error): an in-process handler or a function's process, the poller does not care. Bounded:
:meth:`Poller.run` stops after ``max_rounds`` batches or ``max_seconds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from reminders.local.event_source import (
    Counts,
    InvalidBatchResponse,
    batch_failures,
    error_text,
    sqs_event,
)
from reminders.local.twin.resources import PollerSpec
from reminders.queue import SQS_BATCH, Queue

Invoke = Callable[[dict[str, Any]], Any]
# Lambda starts an SQS event source with five pollers and scales up from there; without a
# MaximumConcurrency the twin keeps to this many batches in flight.
DEFAULT_CONCURRENCY = 5


@dataclass(frozen=True)
class Invocation:
    function: str        # the function's logical id
    records: int
    duration_ms: float
    error: bool          # the function raised (Lambda's Errors metric)


class Poller:
    def __init__(self, spec: PollerSpec, queue: Queue, invoke: Invoke, *, region: str,
                 queue_arn: str | None = None, default_concurrency: int = DEFAULT_CONCURRENCY,
                 on_invocation: Callable[[Invocation], None] | None = None,
                 idle_sleep: float = 0.05, max_concurrency: int | None = None) -> None:
        self.spec = spec
        self.queue = queue
        self.invoke = invoke
        self.region = region
        self.arn = queue_arn or queue.arn()
        self.concurrency = spec.maximum_concurrency or default_concurrency
        if max_concurrency is not None:  # what one machine holds (the twin's instances)
            self.concurrency = min(self.concurrency, max_concurrency)
        self.on_invocation = on_invocation
        self.idle_sleep = idle_sleep
        self.counts = Counts()
        self.in_flight = 0
        self.peak_in_flight = 0
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()
        # Set by the caller to end run() after the batches in flight (a function that cannot
        # initialise would fail every batch until the bounds).
        self.stopped = threading.Event()

    def receive_batch(self) -> list[dict[str, Any]]:
        """Up to BatchSize messages, receiving until the batch is full or the batching window
        has passed (one receive when the window is 0)."""
        deadline = time.monotonic() + self.spec.maximum_batching_window
        batch: list[dict[str, Any]] = []
        while len(batch) < self.spec.batch_size:
            got = self.queue.receive(min(SQS_BATCH, self.spec.batch_size - len(batch)))
            batch += got
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not got:
                time.sleep(min(self.idle_sleep, left))
        return batch

    def handle(self, messages: list[dict[str, Any]]) -> set[str]:
        """Invoke the function with ``messages`` and delete what succeeded; return the ids
        left to the visibility timeout."""
        ids = {m["MessageId"] for m in messages}
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        started = time.monotonic()
        raised = False
        try:
            answer = self.invoke(sqs_event(messages, self.arn, self.region))
            failed = batch_failures(answer, ids) if self.spec.report_batch_item_failures \
                else set()
            error = None
        except InvalidBatchResponse as exc:
            failed, error = ids, f"invalid batch response: {exc}"
        except Exception as exc:  # noqa: BLE001 (a function error fails its batch, as in Lambda)
            failed, error, raised = ids, error_text(exc), True
        finally:
            duration = (time.monotonic() - started) * 1000
            with self._lock:
                self.in_flight -= 1
        done = [m["ReceiptHandle"] for m in messages if m["MessageId"] not in failed]
        if done:
            self.queue.delete(done)
        with self._lock:
            self.counts.batches += 1
            self.counts.records += len(messages)
            self.counts.failures += len(failed)
            self.batch_sizes.append(len(messages))
            if error is not None:
                self.counts.add_error(error)
        if self.on_invocation is not None:
            self.on_invocation(Invocation(self.spec.function, len(messages), duration, raised))
        return failed

    def run(self, *, max_rounds: int, max_seconds: float) -> bool:
        """Poll with up to ``concurrency`` batches in flight until the queue is empty (nothing
        visible, in flight or delayed: True), or ``max_rounds`` batches were handled or
        ``max_seconds`` passed (False). A disabled mapping polls nothing."""
        if not self.spec.enabled:
            return False
        deadline = time.monotonic() + max_seconds
        rounds = 0
        emptied = threading.Event()

        def worker() -> None:
            nonlocal rounds
            while not emptied.is_set() and not self.stopped.is_set() and \
                    time.monotonic() < deadline:
                with self._lock:
                    if rounds >= max_rounds:
                        return
                    rounds += 1
                messages = self.receive_batch()
                if messages:
                    self.handle(messages)
                    continue
                with self._lock:
                    rounds -= 1  # an empty receive is no round
                if self.queue.depth() == 0:
                    emptied.set()
                    return
                time.sleep(self.idle_sleep)

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            for future in [pool.submit(worker) for _ in range(self.concurrency)]:
                future.result()
        return emptied.is_set()
