"""A chunk of leases from the scanner (asynchronous invoke) -> SendMessageBatch of their IDs.
It raises when the queue refused part of the chunk, so Lambda retries the chunk."""

import os
from typing import Any

from reminders import fanout
from reminders.observability import logger

if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # a missing setting fails the cold start
    fanout.current_sender()


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
    return fanout.current_sender().send(event)
