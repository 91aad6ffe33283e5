"""Publishing fanned out to publisher functions.

The scanner leases and fences exactly as it does when it publishes itself; only the hand-over
differs. :class:`FanOutPublisher` is the scanner's side: it splits a pass's
``{delivery id, lease token}`` pairs into chunks of REMINDERS_PUBLISH_CHUNK and queues each
chunk as one asynchronous invocation of the publisher function (``functions/publisher``),
``concurrency`` invokes at a time. :class:`ChunkSender` is the publisher's side: it sends its
chunk to the deliveries queue with SendMessageBatch (reminders.queue), in parallel.

What each failure does (every one delays, none settles or duplicates an effect):

- An invoke Lambda refuses (throttled, an error, unreachable): the chunk's messages come back
  to the scanner as refused, and it releases their leases fenced by token, as it does for
  messages SQS refuses.
- A publisher that fails after Lambda queued its chunk: it raises, Lambda retries the chunk
  (at most twice, within the function's maximum event age), then drops it. A chunk never
  published leaves its leases to expire; the scanner's reclaim takes them back and they are
  due again. A chunk that arrives after that reclaim carries stale lease tokens: the consumer's
  fenced start ignores every message of it.
- A chunk published twice (a retry after part of it went out): two messages with one lease
  token; the consumer's fenced start takes the first and ignores the second.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from reminders.errors import ConfigError, InvalidInput, RemindersError
from reminders.queue import LeaseMessage, Publisher, Queue, Rejected

PAYLOAD_VERSION = 1


class ChunkInvoker(Protocol):
    """Queues one chunk for a publisher function; raises when it was not queued."""

    def invoke(self, payload: bytes) -> None: ...


class PublishIncomplete(RemindersError):
    """The deliveries queue refused part of a chunk; raised so Lambda retries the chunk."""


def payload(chunk: Sequence[LeaseMessage]) -> bytes:
    """``{"version": 1, "messages": [[id, "token"], ...]}``: identifiers only, never state."""
    pairs = ",".join(f'[{int(m.delivery_id)},"{m.lease_token}"]' for m in chunk)
    return f'{{"version":{PAYLOAD_VERSION},"messages":[{pairs}]}}'.encode()


def parse_payload(event: Any) -> list[LeaseMessage]:
    """The chunk a publisher was given; InvalidInput names what is wrong."""
    if not isinstance(event, dict):
        raise InvalidInput(f"publisher event must be a JSON object, got {type(event).__name__}")
    if event.get("version") != PAYLOAD_VERSION:
        raise InvalidInput(f"publisher event version must be {PAYLOAD_VERSION}, got "
                           f"{event.get('version')!r}")
    pairs = event.get("messages")
    if not isinstance(pairs, list):
        raise InvalidInput("publisher event: messages must be a list")
    messages = []
    for index, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) != 2:
            raise InvalidInput(f"publisher event: messages[{index}] must be [delivery_id, "
                               "lease_token]")
        try:
            messages.append(LeaseMessage.checked(pair[0], pair[1]))
        except InvalidInput as exc:
            raise InvalidInput(f"publisher event: messages[{index}]: {exc}") from None
    return messages


class FanOutPublisher:
    """The scanner's publisher when REMINDERS_PUBLISHER_FUNCTION is set: one asynchronous
    invoke per chunk; a refused invoke refuses every message of its chunk."""

    def __init__(self, invoker: ChunkInvoker, chunk: int) -> None:
        if chunk < 1:
            raise ConfigError(f"REMINDERS_PUBLISH_CHUNK must be at least 1, got {chunk}")
        self.invoker = invoker
        self.chunk = chunk

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]:
        chunks = [messages[i:i + self.chunk] for i in range(0, len(messages), self.chunk)]
        if concurrency <= 1 or len(chunks) <= 1:
            return [r for chunk in chunks for r in self._hand_over(chunk)]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(concurrency, len(chunks))) as pool:
            return [r for part in pool.map(self._hand_over, chunks) for r in part]

    def _hand_over(self, chunk: Sequence[LeaseMessage]) -> list[Rejected]:
        try:
            self.invoker.invoke(payload(chunk))
        except Exception as exc:  # noqa: BLE001 (any refused invoke refuses its chunk)
            return [Rejected(m, f"publisher not invoked: {exc}", invoke_refused=True)
                    for m in chunk]
        return []


@dataclass(frozen=True)
class ChunkSender:
    """The publisher function's work: send one chunk to the deliveries queue."""

    queue: Queue
    concurrency: int

    def send(self, event: Any) -> dict[str, int]:
        messages = parse_payload(event)
        rejected = self.queue.publish(messages, concurrency=self.concurrency)
        if rejected:
            raise PublishIncomplete(
                f"the deliveries queue refused {len(rejected)} of {len(messages)} messages "
                f"(first: {rejected[0].reason}); the chunk is retried, and its leases expire "
                "and are reclaimed if it never goes out")
        return {"published": len(messages)}


def sender_from_env(environ: Mapping[str, str] | None = None) -> ChunkSender:
    """The publisher's settings: the queue and its SendMessageBatch concurrency (no database)."""
    from reminders import aws
    from reminders.config import check_names, limits_from_env

    env = os.environ if environ is None else environ
    check_names(env)
    url = env.get("REMINDERS_QUEUE_URL")
    if not url:
        raise ConfigError("REMINDERS_QUEUE_URL is not set: the publisher sends to it")
    return ChunkSender(Queue(aws.lean_client("sqs"), url), limits_from_env(env).publish_concurrency)


def publisher_from_settings(function_name: str, chunk: int) -> Publisher:
    """The scanner's fan-out to ``function_name`` through Lambda (reminders.lambdas)."""
    from reminders import aws
    from reminders.lambdas import EventInvoker

    return FanOutPublisher(EventInvoker(function_name, aws.lean_client("lambda")), chunk)


_installed: ChunkSender | None = None


def install_sender(sender: ChunkSender | None) -> None:
    """Set the sender the publisher handler uses (local stack, tests); None: the environment."""
    global _installed
    _installed = sender


def current_sender() -> ChunkSender:
    global _installed
    if _installed is None:
        _installed = sender_from_env()
    return _installed
