"""CloudFormation custom resource: apply the database migrations on create and update."""

import os
from typing import Any

from reminders import config, db
from reminders.db import migrate
from reminders.observability import logger

if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # validate the settings at cold start
    config.load()


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request = event.get("RequestType", "Create")
    if request == "Delete":  # the data outlives the stack; nothing to undo
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "reminders-schema")}
    settings = config.load()
    with db.connect(settings.database_url, prepare=settings.db_prepare) as conn:
        applied = migrate.apply(conn)
    logger.info("migrations applied", extra={"applied": applied})
    return {"PhysicalResourceId": "reminders-schema",
            "Data": {"Applied": ",".join(map(str, applied)) or "none"}}
