"""Payloads as every reader of JSON can read them back.

Postgres's jsonb keeps numbers of any size and nesting of any depth; Python's JSON reader (and
so psycopg's) does not: 1e5000 reads as infinity, an integer of thousands of digits is refused,
and nesting past about a thousand levels raises RecursionError. The application APIs refuse
such a payload at entry (:func:`check_payload`; the SQL API's ``check_payload`` applies the
same rule to jsonb's text of it); the consumer reads each stored payload on its own
(:func:`read_payload`), so one written before the check, or by hand, parks its delivery and
nothing else.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32  # objects and arrays nested in a payload at most
MAX_INTEGER_DIGITS = 4300  # Python's default int_max_str_digits: what its JSON reader takes


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):
        raise ValueError(f"the number {number[:20]}... is out of range")
    return value


def _whole(number: str) -> int:
    if len(number.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"the number {number[:20]}... is out of range")
    return int(number)


def read_payload(text: str) -> dict[str, Any]:
    """A stored payload, parsed; ValueError naming why when no JSON reader keeps it whole."""
    try:
        loaded = json.loads(text, parse_float=_finite, parse_int=_whole)
    except RecursionError:
        raise ValueError("it nests too deeply to parse") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"it is a JSON {type(loaded).__name__}, not an object")
    return loaded


def check_payload(text: str) -> None:
    """Refuse (ValueError, naming why) a payload that nests deeper than MAX_DEPTH, or that
    the service could not read back."""
    depth = deepest = 0
    quoted = escaped = False
    for ch in text:  # the JSON text's nesting, strings skipped
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                raise ValueError(f"it nests deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1
    read_payload(text)
