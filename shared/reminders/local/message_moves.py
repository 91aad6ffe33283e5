"""SQS's message move tasks in the local moto server, which has none (moto 5.2.5): the
operator's console redrive of a dead-letter queue, as the AWS console calls it.

``StartMessageMoveTask`` (SourceArn, optional DestinationArn, optional
MaxNumberOfMessagesPerSecond), ``ListMessageMoveTasks`` and ``CancelMessageMoveTask``, as
strict as SQS:

- the source must be an existing queue of this account and region (else
  ``ResourceNotFoundException``) that is the dead-letter queue of another queue: a queue's
  RedrivePolicy names it, and the source's RedriveAllowPolicy permits that queue
  (``allowAll``, or ``byQueue`` listing it; ``denyAll`` permits none); else
  ``InvalidParameterValue``;
- a DestinationArn must be an existing queue (``ResourceNotFoundException``) of the source's
  type (standard or FIFO), other than the source; the rate, when given, 1 to 500 a second;
- one active task per source: another Start while one runs is ``InvalidParameterValue``;
- the task runs in the background at the given rate (else at most DEFAULT_RATE a second); it
  moves the messages visible when it started (``ApproximateNumberOfMessagesToMove``), each
  as a new message with the same body and message attributes, receive count 0, to the
  DestinationArn or, without one, back to the queue whose redrive policy moved it here; a
  message that came by SendMessage has no such queue, and the task stops FAILED on it with a
  FailureReason saying so (the messages moved before it stay moved);
- ``ListMessageMoveTasks`` answers the source's latest tasks (MaxResults 1-10, default 1),
  newest first, the TaskHandle only on a RUNNING one; ``CancelMessageMoveTask`` stops a
  RUNNING task (``ResourceNotFoundException`` for an unknown handle, ``InvalidParameterValue``
  for one that is not running) and answers how many it moved;
- authorization is moto's, against the source queue's ARN: ``sqs:StartMessageMoveTask``,
  ``sqs:ListMessageMoveTasks``, ``sqs:CancelMessageMoveTask``; Start also needs
  ``sqs:ReceiveMessage``, ``sqs:DeleteMessage`` and ``sqs:GetQueueAttributes`` on the source
  and ``sqs:SendMessage`` on a DestinationArn, as the console's redrive does.

:func:`install` patches moto's SQS responses and backend in the server's process; moto then
records which queue moved each message into a dead-letter queue.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

MAX_RATE = 500
DEFAULT_RATE = 100  # messages a second when the caller leaves the rate to SQS
MAX_LISTED = 10
MOVE_ACTIONS = ("StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask")
SOURCE_ATTRIBUTE = "_reminders_dead_letter_source_arn"  # on a moto Message
NO_SOURCE = ("the message was not moved here by a queue's redrive policy (it was sent to "
             "this queue), so it has no source queue to go back to: give a DestinationArn")


@dataclass
class MoveTask:
    handle: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    started_ms: int
    to_move: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def as_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "Status": self.status, "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms}
        if self.status == "RUNNING":
            result["TaskHandle"] = self.handle
        if self.destination_arn is not None:
            result["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            result["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure is not None:
            result["FailureReason"] = self.failure
        return result


_TASKS: dict[str, list[MoveTask]] = {}  # by source ARN, newest first
_LOCK = threading.Lock()


def _error(code: str, message: str) -> Exception:
    from moto.sqs.exceptions import SQSException

    return SQSException(code, message)


def _arn_parts(arn: Any, parameter: str) -> tuple[str, str, str]:
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not parts[5]:
        raise _error("InvalidParameterValue",
                     f"Value {arn!r} for parameter {parameter} is invalid. Reason: not an SQS "
                     "queue ARN.")
    return parts[3], parts[4], parts[5]


def _queue(response: Any, arn: Any, parameter: str) -> Any:
    """The queue ``arn`` names, in the caller's account; ResourceNotFoundException if none."""
    from moto.sqs.models import sqs_backends

    region, account, name = _arn_parts(arn, parameter)
    queue = sqs_backends[account][region].queues.get(name) \
        if account == response.current_account else None
    if queue is None:
        raise _error("ResourceNotFoundException",
                     f"The resource that you specified for the {parameter} parameter doesn't "
                     "exist.")
    return queue


def _permits(dead_letter: Any, source_arn: str) -> bool:
    """Whether the dead-letter queue's RedriveAllowPolicy lets ``source_arn`` use it."""
    policy = getattr(dead_letter, "redrive_allow_policy", None)
    if not policy:
        return True
    try:
        document = json.loads(policy) if isinstance(policy, str) else dict(policy)
    except (ValueError, TypeError):
        return False
    permission = document.get("redrivePermission", "allowAll")
    if permission == "allowAll":
        return True
    if permission == "byQueue":
        return source_arn in (document.get("sourceQueueArns") or [])
    return False


def dead_letter_sources(response: Any, dead_letter: Any) -> list[Any]:
    """The queues whose redrive policy names ``dead_letter`` and that it permits."""
    from moto.sqs.models import sqs_backends

    found = []
    for queue in sqs_backends[response.current_account][response.region].queues.values():
        policy = queue.redrive_policy or {}
        if policy.get("deadLetterTargetArn") == dead_letter.queue_arn and \
                _permits(dead_letter, queue.queue_arn):
            found.append(queue)
    return found


def _authorize(response: Any, action: str, resource: str) -> None:
    """moto's authorization of ``action`` on ``resource`` for this request's caller."""
    from moto.iam.access_control import IAMRequest

    class AsAction(IAMRequest):
        action_name = action

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "action": action})

    response._authenticate_and_authorize_action(AsAction, resource)


def _handle(source_arn: str) -> str:
    token = json.dumps({"taskId": str(uuid.uuid4()), "sourceArn": source_arn})
    return base64.b64encode(token.encode()).decode()


def _source_of_handle(handle: Any) -> str | None:
    try:
        found = json.loads(base64.b64decode(str(handle), validate=True))
        return str(found["sourceArn"])
    except (ValueError, KeyError, TypeError):
        return None


def start_message_move_task(self: Any) -> Any:
    from moto.core.responses import ActionResult

    source_arn = self._get_param("SourceArn")
    destination_arn = self._get_param("DestinationArn")
    rate = self._get_param("MaxNumberOfMessagesPerSecond")
    if not source_arn:
        raise _error("MissingParameter", "The request must contain the parameter SourceArn.")
    source = _queue(self, source_arn, "SourceArn")
    for action in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes"):
        _authorize(self, action, source.queue_arn)
    destination = None
    if destination_arn:
        destination = _queue(self, destination_arn, "DestinationArn")
        _authorize(self, "SendMessage", destination.queue_arn)
        if destination is source:
            raise _error("InvalidParameterValue",
                         "Source queue arn and destination queue arn cannot be the same.")
        if bool(destination.fifo_queue) != bool(source.fifo_queue):
            raise _error("InvalidParameterValue",
                         "The source queue and the destination queue must be of the same "
                         "type (standard or FIFO).")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)
                             or not 1 <= rate <= MAX_RATE):
        raise _error("InvalidParameterValue",
                     f"Value {rate} for parameter MaxNumberOfMessagesPerSecond is invalid. "
                     f"Reason: must be from 1 to {MAX_RATE}.")
    if not dead_letter_sources(self, source):
        raise _error("InvalidParameterValue",
                     "Source queue must be configured as a Dead Letter Queue.")
    with _LOCK:
        tasks = _TASKS.setdefault(source.queue_arn, [])
        if any(t.status in ("RUNNING", "CANCELLING") for t in tasks):
            raise _error("InvalidParameterValue",
                         "There is already a task running. Only one active task is allowed "
                         "for a source queue arn at a given time.")
        snapshot = [m for m in list(source._messages) if m.visible and not m.delayed]
        task = MoveTask(_handle(source.queue_arn), source.queue_arn,
                        destination.queue_arn if destination is not None else None, rate,
                        int(time.time() * 1000), len(snapshot))
        tasks.insert(0, task)
        del tasks[MAX_LISTED:]
    threading.Thread(target=_run, args=(self, task, source, destination, snapshot),
                     daemon=True, name="sqs-message-move").start()
    return ActionResult({"TaskHandle": task.handle})


def _run(response: Any, task: MoveTask, source: Any, destination: Any,
         snapshot: list[Any]) -> None:
    from moto.sqs.models import sqs_backends

    backend = sqs_backends[response.current_account][response.region]
    pause = 1.0 / (task.rate or DEFAULT_RATE)
    try:
        for message in snapshot:
            if task.cancel.is_set():
                break
            with source._messages_lock:
                present = message in source._messages and message.visible
            if not present:  # received, deleted or expired meanwhile: not this task's
                continue
            target = destination
            if target is None:
                origin = getattr(message, SOURCE_ATTRIBUTE, None)
                target = next((q for q in backend.queues.values() if q.queue_arn == origin),
                              None)
                if target is None:
                    task.status, task.failure = "FAILED", (
                        NO_SOURCE if origin is None else
                        f"the message's source queue {origin} no longer exists")
                    return
            backend.send_message(target.name, message.body,
                                 message_attributes=dict(message.message_attributes),
                                 deduplication_id=message.deduplication_id,
                                 group_id=message.group_id)
            with source._messages_lock:
                if message in source._messages:
                    source._messages.remove(message)
                    source.pending_messages.discard(message)
            task.moved += 1
            time.sleep(pause)
    except Exception as exc:  # noqa: BLE001 (the task fails; SQS says why)
        task.status, task.failure = "FAILED", f"{type(exc).__name__}: {exc}"
        return
    task.status = "CANCELLED" if task.cancel.is_set() else "COMPLETED"


def list_message_move_tasks(self: Any) -> Any:
    from moto.core.responses import ActionResult

    source_arn = self._get_param("SourceArn")
    if not source_arn:
        raise _error("MissingParameter", "The request must contain the parameter SourceArn.")
    source = _queue(self, source_arn, "SourceArn")
    limit = self._get_param("MaxResults")
    limit = 1 if limit is None else limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
        raise _error("InvalidParameterValue",
                     f"Value {limit} for parameter MaxResults is invalid. Reason: must be from "
                     f"1 to {MAX_LISTED}.")
    with _LOCK:
        tasks = list(_TASKS.get(source.queue_arn, []))[:limit]
    return ActionResult({"Results": [t.as_result() for t in tasks]})


def cancel_message_move_task(self: Any) -> Any:
    from moto.core.responses import ActionResult

    handle = self._get_param("TaskHandle")
    source_arn = _source_of_handle(handle)
    with _LOCK:
        task = next((t for t in _TASKS.get(source_arn or "", []) if t.handle == handle), None)
        if task is None:
            raise _error("ResourceNotFoundException",
                         "The resource that you specified for the TaskHandle parameter "
                         "doesn't exist.")
        if task.status != "RUNNING":
            raise _error("InvalidParameterValue",
                         f"The task is {task.status}: only a RUNNING task can be cancelled.")
        task.status = "CANCELLING"
        task.cancel.set()
    return ActionResult({"ApproximateNumberOfMessagesMoved": task.moved})


def _move_resource(response: Any) -> str:
    """The source queue's ARN the move actions are authorized against."""
    action = response._get_action()
    arn = _source_of_handle(response._get_param("TaskHandle")) \
        if action == "CancelMessageMoveTask" else response._get_param("SourceArn")
    return str(arn) if isinstance(arn, str) and arn.startswith("arn:aws:sqs:") else "*"


def install() -> None:
    """Give moto's SQS the three operations, the move actions' resource, and a record of the
    queue each dead-lettered message came from."""
    from moto.sqs.models import SQSBackend
    from moto.sqs.responses import SQSResponse

    SQSResponse.start_message_move_task = start_message_move_task  # type: ignore[attr-defined]
    SQSResponse.list_message_move_tasks = list_message_move_tasks  # type: ignore[attr-defined]
    SQSResponse.cancel_message_move_task = cancel_message_move_task  # type: ignore[attr-defined]
    queue_resource = SQSResponse._determine_resource

    def resource(self: Any) -> str:
        if self._get_action() in MOVE_ACTIONS:
            return _move_resource(self)
        return str(queue_resource(self))

    SQSResponse._determine_resource = resource  # type: ignore[method-assign]
    receive = SQSBackend.receive_message

    def receive_and_record(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        """moto moves a message past its maxReceiveCount into the dead-letter queue while
        receiving: mark each one moved with the queue it came from (SQS keeps it as the
        message's DeadLetterQueueSourceArn)."""
        queue = self.get_queue(queue_name)
        dead_letter = queue.dead_letter_queue
        before = set(map(id, queue._messages)) if dead_letter is not None else set()
        try:
            return receive(self, queue_name, *args, **kwargs)
        finally:
            if dead_letter is not None:
                for message in list(dead_letter._messages):
                    if id(message) in before:
                        setattr(message, SOURCE_ATTRIBUTE, queue.queue_arn)

    SQSBackend.receive_message = receive_and_record  # type: ignore[method-assign]
