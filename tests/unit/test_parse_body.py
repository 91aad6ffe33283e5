"""Queue message bodies: whatever arrives, parse_body returns a LeaseMessage or raises
InvalidInput with one line naming what is wrong; nothing else escapes (invariant 7)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reminders.errors import InvalidInput
from reminders.queue import (
    BIGINT_MAX,
    MAX_BODY_BYTES,
    MAX_BODY_NESTING,
    LeaseMessage,
    parse_body,
)

TOKEN = "6f1c2a3e-8d5b-4c7a-9e0f-1a2b3c4d5e6f"


def body(delivery_id: Any, token: Any = TOKEN, **extra: Any) -> str:
    return json.dumps({"delivery_id": delivery_id, "lease_token": token, **extra},
                      ensure_ascii=False)


def with_field(name: str, raw_json: str) -> str:
    """A good body with one more field whose JSON text is given as is."""
    return body(1)[:-1] + f', "{name}": {raw_json}}}'


def reason(text: Any) -> str:
    with pytest.raises(InvalidInput) as err:
        parse_body(text)
    message = str(err.value)
    assert "\n" not in message and len(message) <= 300, message
    return message


# ---------------------------------------------------------------- delivery ids and bigint


def test_the_largest_bigint_is_a_delivery_id() -> None:
    assert BIGINT_MAX == 2**63 - 1
    assert parse_body(body(2**63 - 1)) == LeaseMessage(2**63 - 1, UUID(TOKEN))


@pytest.mark.parametrize("delivery_id", [2**63, 2**64 + 5, 10**40])
def test_a_delivery_id_beyond_bigint_is_rejected_naming_the_field(delivery_id: int) -> None:
    assert reason(body(delivery_id)) == (
        f"delivery_id must be at most {2**63 - 1} (Postgres bigint), got {delivery_id}")


def test_a_delivery_id_of_hundreds_of_digits_is_quoted_short() -> None:
    message = reason(body(10**300))
    assert message.startswith("delivery_id must be at most 9223372036854775807 (Postgres "
                              "bigint), got 1000")
    assert "..." in message and len(message) < 140


@pytest.mark.parametrize("text", ["1.0", "1e3", "1E3", "1e400", "-0.0", "1.5"])
def test_a_float_delivery_id_is_rejected_even_when_whole(text: str) -> None:
    message = reason(f'{{"delivery_id": {text}, "lease_token": "{TOKEN}"}}')
    assert message.startswith("delivery_id must be a positive integer, got ")


@pytest.mark.parametrize("value", [[1], {"id": 1}, [[[[1]]]]])
def test_a_nested_delivery_id_is_rejected(value: Any) -> None:
    assert reason(body(value)).startswith("delivery_id must be a positive integer, got ")


def test_a_nested_lease_token_is_quoted_short() -> None:
    message = reason(body(5, [["x" * 200] * 5] * 3))
    assert message.startswith("lease_token must be a UUID string, got [[")


# ---------------------------------------------------------------- what JSON cannot be


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_standard_json_constants_are_rejected_wherever_they_are(constant: str) -> None:
    expected = f"body is not JSON: {constant} is not a JSON value"
    assert reason(f'{{"delivery_id": {constant}, "lease_token": "{TOKEN}"}}') == expected
    assert reason(f'{{"delivery_id": 1, "lease_token": "{TOKEN}", "x": [{constant}]}}') == (
        expected)


@pytest.mark.parametrize("depth", [MAX_BODY_NESTING + 1, 1_000, 2_000])
def test_deep_nesting_is_invalid_input_not_recursion_error(depth: int) -> None:
    expected = f"body nests deeper than {MAX_BODY_NESTING} levels"
    texts = ["[" * depth + "]" * depth, "[" * depth, '{"a":' * min(depth, 800),
             with_field("x", "[" * (depth - 1) + "]" * (depth - 1))]
    for text in texts:
        assert len(text) <= MAX_BODY_BYTES  # within the size limit: it reaches the nesting check
        assert reason(text) == expected


def test_nesting_up_to_the_limit_is_parsed() -> None:
    nested = "[" * (MAX_BODY_NESTING - 1) + "]" * (MAX_BODY_NESTING - 1)
    assert parse_body(with_field("x", nested)) == LeaseMessage(1, UUID(TOKEN))


def test_brackets_inside_strings_are_not_nesting() -> None:
    note = '[{"\\' * 200
    assert parse_body(body(1, note=note)) == LeaseMessage(1, UUID(TOKEN))


def test_a_recursion_error_from_the_parser_is_invalid_input(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def recurse(text: str, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    text = body(1)
    monkeypatch.setattr(json, "loads", recurse)  # what parse_body calls, as the module's json
    assert reason(text) == "body nests too deeply to parse"


def test_a_body_over_the_limit_is_not_parsed() -> None:
    assert MAX_BODY_BYTES == 4096
    padded = body(1, pad="x" * MAX_BODY_BYTES)
    assert reason(padded) == f"body is {len(padded)} bytes; the limit is {MAX_BODY_BYTES}"
    assert reason("[" * 300_000) == f"body is 300000 bytes; the limit is {MAX_BODY_BYTES}"


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    padded = body(1, pad="é" * (MAX_BODY_BYTES // 2))
    assert len(padded) < MAX_BODY_BYTES < len(padded.encode())
    assert reason(padded) == (
        f"body is {len(padded.encode())} bytes; the limit is {MAX_BODY_BYTES}")


def test_a_body_at_the_limit_is_parsed() -> None:
    base = body(1, pad="")
    padded = body(1, pad="x" * (MAX_BODY_BYTES - len(base)))
    assert len(padded.encode()) == MAX_BODY_BYTES
    assert parse_body(padded) == LeaseMessage(1, UUID(TOKEN))


def test_text_that_is_not_utf8_is_rejected() -> None:
    raw = b'{"delivery_id": 1, "lease_token": "\xff"}'.decode("utf-8", "surrogateescape")
    assert reason(raw) == (
        "body is not UTF-8 text: surrogates not allowed at character 35")


@pytest.mark.parametrize(("value", "name"), [(None, "NoneType"), (b"{}", "bytes"), (7, "int")])
def test_a_body_that_is_not_a_string_is_rejected(value: Any, name: str) -> None:
    assert reason(value) == f"body must be a string, got {name}"


def test_a_long_lease_token_is_quoted_short() -> None:
    message = reason(body(5, "y" * 2000))
    assert message.startswith("lease_token is not a UUID: 'yyy") and len(message) < 140


# ---------------------------------------------------------------- anything at all

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() |
                st.text(max_size=20))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
IDS = (st.integers() | st.integers(min_value=2**63 - 3, max_value=2**63 + 3) |
       st.floats() | JSON_VALUES)
TOKENS = st.uuids().map(str) | st.uuids().map(lambda u: u.hex) | JSON_VALUES


def holds(text: Any) -> None:
    """parse_body either answers a valid LeaseMessage or raises InvalidInput: nothing else."""
    try:
        got = parse_body(text)
    except InvalidInput as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(got, LeaseMessage)
    assert 0 < got.delivery_id <= BIGINT_MAX
    assert isinstance(got.lease_token, UUID)


@given(st.text())
@example("[" * 3000)
@example('{"delivery_id": 1e3, "lease_token": "' + TOKEN + '"}')
def test_any_text(text: str) -> None:
    holds(text)


@given(st.binary(max_size=300), st.sampled_from(["surrogateescape", "replace", "ignore"]))
def test_any_bytes_decoded(raw: bytes, errors: str) -> None:
    holds(raw.decode("utf-8", errors))
    holds(raw.decode("latin-1"))


@given(JSON_VALUES)
def test_any_json(value: Any) -> None:
    holds(json.dumps(value))


@given(IDS, TOKENS, st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3))
def test_any_message_shaped_object(delivery_id: Any, token: Any, extra: dict[str, Any]) -> None:
    holds(json.dumps({**extra, "delivery_id": delivery_id, "lease_token": token}))


@given(st.integers(min_value=1, max_value=6_000), st.sampled_from(["[", '{"a":', '{"a":[']))
def test_any_nesting(depth: int, opener: str) -> None:
    holds(opener * depth)
    holds('{"delivery_id":' + opener * depth)


def test_a_lease_message_body_is_compact_json_that_parses_back() -> None:
    message = LeaseMessage(BIGINT_MAX, UUID(TOKEN))
    assert message.body() == json.dumps(
        {"delivery_id": message.delivery_id, "lease_token": str(message.lease_token)},
        separators=(",", ":"))
    assert parse_body(message.body()) == message
