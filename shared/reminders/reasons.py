"""The one rule for an operator's reason (``--reason``): why they acted, recorded with who.

Every path that takes a reason checks it here: the command line, the operations function (its
allow-list, and the commands it shares with the command line), the console and
:mod:`reminders.operator`, which records it. A reason is one line of printable text, stripped,
at most :data:`MAX_REASON_LENGTH` characters. Where it is required (``reconcile``, every console
action) a missing or blank one is refused; where it is optional (``cancel``, ``tenants
pause|resume``, ``endpoints``, ``kinds``) leaving it out records no reason, and a blank one is
refused rather than silently recorded as none.
"""

from __future__ import annotations

import unicodedata
from typing import Literal, overload

from reminders.errors import InvalidInput

MAX_REASON_LENGTH = 500
FLAG = "--reason"

# What str.splitlines() breaks a line at, besides \n and \r: a reason shown on one line of a
# table or a timeline must not start another there.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


@overload
def checked_reason(value: str | None, *, required: Literal[True]) -> str: ...
@overload
def checked_reason(value: str | None, *, required: bool) -> str | None: ...


def checked_reason(value: str | None, *, required: bool) -> str | None:
    """``value`` stripped, or InvalidInput naming ``--reason`` when it breaks the rule; None
    when an optional reason was left out."""
    if value is None or not value.strip():
        if required:
            raise InvalidInput(f"{FLAG}: say what you checked")
        if value is None:
            return None
        raise InvalidInput(f"{FLAG}: empty; say why, or leave {FLAG} out")
    text = value.strip()
    if len(text) > MAX_REASON_LENGTH:
        raise InvalidInput(f"{FLAG}: longer than {MAX_REASON_LENGTH} characters ({len(text)})")
    for ch in text:
        if ch in _LINE_BREAKS:
            raise InvalidInput(f"{FLAG}: contains a line break: {text[:40]!r}")
        category = unicodedata.category(ch)
        if category == "Cc":
            raise InvalidInput(f"{FLAG}: contains a control character: {text[:40]!r}")
        if category == "Cs":  # a byte that was not UTF-8, kept by the OS as a lone surrogate
            raise InvalidInput(f"{FLAG}: is not UTF-8 text: {text[:40]!r}")
    return text
