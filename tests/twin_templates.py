"""The synthesized templates the twin's tests read, and copies of them to change."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from reminders.local import roles


@functools.cache
def _template(variant: str) -> Any:
    return roles.synthesized_template({} if variant == "default" else roles.SELF_PUBLISHING)


def template_copy(variant: str = "default") -> Any:
    """A copy of the synthesized template (``default``: with the publisher fan-out;
    ``self-publishing``: the variant the local stack runs), free to change."""
    return copy.deepcopy(_template(variant))


def logical_id(template: Any, prefix: str) -> str:
    """The one resource whose logical id starts with ``prefix`` (CDK adds a hash)."""
    exact = [k for k in template["Resources"] if re.fullmatch(f"{prefix}[0-9A-F]{{8}}", k)]
    found = exact or [k for k in template["Resources"] if k.startswith(prefix)]
    assert len(found) == 1, (prefix, found)
    return str(found[0])


def props(template: Any, prefix: str) -> Any:
    return template["Resources"][logical_id(template, prefix)]["Properties"]
