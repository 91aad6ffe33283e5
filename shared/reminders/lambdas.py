"""The one place that calls Lambda's Invoke API: a synchronous invoke for the operations
function (``reminders --stack``) and an asynchronous one for the publisher functions the
scanner fans out to (reminders.fanout)."""

from __future__ import annotations

import json
from typing import Any

from reminders.errors import CommandFailed, RemindersError
from reminders.outcome import EXIT_UNAVAILABLE

# What Lambda answers when it has queued an asynchronous (Event) invocation.
EVENT_ACCEPTED = 202


class InvokeRefused(RemindersError):
    """Lambda did not queue an asynchronous invocation; the message says what it answered."""


class LambdaInvoker:
    """A synchronous Invoke of the operations function, never retried (a write must not run
    twice)."""

    def __init__(self, function_name: str, client: Any) -> None:
        self.function_name = function_name
        self.client = client

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer = self.client.invoke(FunctionName=self.function_name,
                                    InvocationType="RequestResponse",
                                    Payload=json.dumps(payload).encode())
        body = answer["Payload"].read()
        try:
            data = json.loads(body or b"null")
        except ValueError:
            data = None
        if answer.get("FunctionError"):
            message = data.get("errorMessage") if isinstance(data, dict) else None
            raise CommandFailed(f"the operations function {self.function_name} failed: "
                                f"{message or answer['FunctionError']}", code=EXIT_UNAVAILABLE)
        if not isinstance(data, dict):
            raise CommandFailed(f"the operations function {self.function_name} answered "
                                "something other than a JSON object", code=EXIT_UNAVAILABLE)
        return data


class EventInvoker:
    """An asynchronous (``InvocationType='Event'``) Invoke of one function: Lambda queues the
    payload and answers 202 at once; the function runs later, and Lambda retries it (the
    function's asynchronous configuration) if it fails. Anything but 202, or a failed call,
    raises :class:`InvokeRefused`: the payload was not queued."""

    def __init__(self, function_name: str, client: Any) -> None:
        self.function_name = function_name
        self.client = client

    def invoke(self, payload: bytes) -> None:
        try:
            answer = self.client.invoke(FunctionName=self.function_name,
                                        InvocationType="Event", Payload=payload)
        except Exception as exc:  # noqa: BLE001 (throttled, refused, unreachable: not queued)
            raise InvokeRefused(f"Invoke of {self.function_name} failed: {exc}") from None
        status = answer.get("StatusCode")
        if status != EVENT_ACCEPTED:
            raise InvokeRefused(f"Invoke of {self.function_name} answered {status}, not "
                                f"{EVENT_ACCEPTED}")
