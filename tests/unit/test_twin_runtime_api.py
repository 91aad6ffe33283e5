"""The twin's Runtime API endpoint as a runtime client sees it, and the resolution of the
template's references for the functions' settings."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator

import pytest

from reminders.local.twin.references import REF, LocalValues, UnresolvedReference, resolve
from reminders.local.twin.runtime_api import MAX_RESPONSE_BYTES, Invocation, RuntimeApi

PREFIX = "/2018-06-01/runtime"


@pytest.fixture
def api() -> Iterator[RuntimeApi]:
    endpoint = RuntimeApi()
    yield endpoint
    endpoint.close()


def call(api: RuntimeApi, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(api.address, timeout=10)
    connection.request(method, PREFIX + path, body, headers or {})
    answer = connection.getresponse()
    data = answer.read()
    connection.close()
    return answer.status, dict(answer.getheaders()), data


def handed_out(api: RuntimeApi, invocation: Invocation) -> tuple[int, dict[str, str], bytes]:
    """A runtime's `next` call, answered once ``invocation`` is offered."""
    got: list[tuple[int, dict[str, str], bytes]] = []
    caller = threading.Thread(target=lambda: got.append(call(api, "GET", "/invocation/next")))
    caller.start()
    event = api.next_event(5)
    assert event is not None and event.kind == "next"
    api.offer(invocation)
    caller.join(10)
    return got[0]


INVOCATION = Invocation("req-1", b'{"a": 1}', 1_900_000_000_000,
                        "arn:aws:lambda:us-east-1:123456789012:function:f", "Root=1-x")


def test_next_hands_out_the_invocation_with_lambdas_headers(api: RuntimeApi) -> None:
    status, headers, body = handed_out(api, INVOCATION)
    assert (status, body) == (200, b'{"a": 1}')
    assert headers["Lambda-Runtime-Aws-Request-Id"] == "req-1"
    assert headers["Lambda-Runtime-Deadline-Ms"] == "1900000000000"
    assert headers["Lambda-Runtime-Invoked-Function-Arn"].endswith(":function:f")
    assert headers["Lambda-Runtime-Trace-Id"] == "Root=1-x"
    assert call(api, "POST", "/invocation/req-1/response", b'"done"')[0] == 202
    event = api.next_event(5)
    assert event is not None and (event.kind, event.request_id, event.body) == (
        "response", "req-1", b'"done"')


def test_a_response_for_another_request_id_or_a_second_one_is_refused(api: RuntimeApi) -> None:
    handed_out(api, INVOCATION)
    status, _, body = call(api, "POST", "/invocation/req-2/response", b"{}")
    assert status == 400 and json.loads(body)["errorType"] == "InvalidRequestID"
    assert call(api, "POST", "/invocation/req-1/response", b"{}")[0] == 202
    assert call(api, "POST", "/invocation/req-1/error", b"{}")[0] == 400


def test_a_response_over_six_megabytes_ends_the_invocation_as_an_error(api: RuntimeApi) -> None:
    handed_out(api, INVOCATION)
    status, _, _ = call(api, "POST", "/invocation/req-1/response",
                        b"x" * (MAX_RESPONSE_BYTES + 1))
    assert status == 413
    event = api.next_event(5)
    assert event is not None and event.kind == "error"
    assert event.error()["errorType"] == "Function.ResponseSizeTooLarge"


def test_an_init_error_is_reported_with_its_type(api: RuntimeApi) -> None:
    document = {"errorMessage": "Unable to import module 'x'", "errorType":
                "Runtime.ImportModuleError"}
    status, _, _ = call(api, "POST", "/init/error", json.dumps(document).encode(),
                        {"Lambda-Runtime-Function-Error-Type": "Runtime.ImportModuleError"})
    assert status == 202
    event = api.next_event(5)
    assert event is not None and event.kind == "init_error" and event.error() == document


LOCAL = LocalValues("eu-west-1", "111122223333", {
    "Queue": {REF: "http://q/deliveries", "Arn": "arn:aws:sqs:eu-west-1:111122223333:d"},
    "Proxy": {"Endpoint": "127.0.0.1"}})


@pytest.mark.parametrize(("value", "expected"), [
    ({"Ref": "Queue"}, "http://q/deliveries"),
    ({"Fn::GetAtt": ["Proxy", "Endpoint"]}, "127.0.0.1"),
    ({"Fn::GetAtt": "Queue.Arn"}, "arn:aws:sqs:eu-west-1:111122223333:d"),
    ({"Fn::Join": ["", ["https://sts.", {"Ref": "AWS::Region"}, ".",
                        {"Ref": "AWS::URLSuffix"}]]}, "https://sts.eu-west-1.amazonaws.com"),
    ({"Fn::Sub": "${AWS::AccountId}/${Queue.Arn}"},
     "111122223333/arn:aws:sqs:eu-west-1:111122223333:d"),
    ({"Fn::Sub": ["${host}:5432", {"host": {"Fn::GetAtt": ["Proxy", "Endpoint"]}}]},
     "127.0.0.1:5432"),
    ({"Fn::Select": [1, {"Fn::Split": [":", "a:b:c"]}]}, "b"),
])
def test_references_resolve_to_the_local_values(value: object, expected: str) -> None:
    assert resolve(value, LOCAL, "X") == expected


@pytest.mark.parametrize(("value", "problem"), [
    ({"Ref": "Nothing"}, "X: names Nothing, which nothing stands for here"),
    ({"Fn::GetAtt": ["Proxy", "Port"]}, "X: names Proxy.Port"),
    ({"Fn::ImportValue": "other-stack"}, "X: Fn::ImportValue is not resolved here"),
    ({"Fn::Select": [3, ["a"]]}, "X: Fn::Select 3"),
])
def test_a_reference_nothing_stands_for_is_an_error_naming_it(value: object,
                                                                problem: str) -> None:
    with pytest.raises(UnresolvedReference, match=f"^{problem}"):
        resolve(value, LOCAL, "X")
