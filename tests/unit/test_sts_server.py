"""The STS stand-in checks a SigV4 signature the way STS does: what botocore signs, it accepts;
anything changed after signing (the method, the host, a parameter, a signed header's value,
the key, the region, the time) it refuses with STS's error code."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError

from reminders.local.sts_server import Principal, Registry, StsError, StsStandIn, verify

REGION = "eu-west-1"
HOST = f"sts.{REGION}.amazonaws.com"
USER = Principal("AKIDUSER", "user-secret", "arn:aws:iam::111122223333:user/alice")
ROLE = Principal("ASIAROLE", "role-secret",
                 "arn:aws:sts::111122223333:assumed-role/Ops/alice", session_token="tok-1",
                 user_id="AROAEXAMPLE:alice")


def registry() -> Registry:
    known = Registry()
    known.add(USER)
    known.add(ROLE)
    return known


def client(principal: Principal = USER, *, endpoint: str = f"https://{HOST}",
           region: str = REGION, secret: str | None = None) -> Any:
    return boto3.client("sts", region_name=region, endpoint_url=endpoint,
                        aws_access_key_id=principal.access_key,
                        aws_secret_access_key=secret or principal.secret_key,
                        aws_session_token=principal.session_token)


def presign(sts: Any, *, method: str | None = "GET", header: str = "digest-1",
            expires: int = 60) -> str:
    def bind(request: Any, **_: Any) -> None:
        request.headers["x-reminders-request"] = header

    sts.meta.events.register_first("before-sign.sts.GetCallerIdentity", bind)
    extra = {"HttpMethod": method} if method else {}
    url: str = sts.generate_presigned_url("get_caller_identity", ExpiresIn=expires, **extra)
    return url


def signed_at(url: str) -> datetime:
    stamp = dict(p.split("=", 1) for p in urlsplit(url).query.split("&"))["X-Amz-Date"]
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def check(url: str, *, method: str = "GET", header: str | None = "digest-1",
          host: str | None = None, now: datetime | None = None,
          region: str = REGION) -> Principal:
    parts = urlsplit(url)
    headers = {"host": [host or parts.netloc]}
    if header is not None:
        headers["x-reminders-request"] = [header]
    target = f"{parts.path or '/'}?{parts.query}"
    principal, params = verify(method=method, target=target, headers=headers, body=b"",
                               now=now or signed_at(url) + timedelta(seconds=1),
                               region=region, registry=registry())
    assert params["Action"] == "GetCallerIdentity"
    return principal


def refused(code: str, url: str, **kwargs: Any) -> str:
    with pytest.raises(StsError) as caught:
        check(url, **kwargs)
    assert (caught.value.status, caught.value.code) == (403, code), caught.value
    return caught.value.message


def test_what_botocore_presigns_for_get_is_accepted_with_the_owner_of_the_key() -> None:
    assert check(presign(client())) == USER
    assert check(presign(client(ROLE))) == ROLE
    # The path and the host as botocore writes them for a stand-in on a port.
    assert check(presign(client(endpoint="http://127.0.0.1:4566"))) == USER


def test_a_proof_presigned_for_post_is_refused_when_sent_as_get() -> None:
    """SigV4 signs the method: botocore's default for STS is POST (boto3 issue 756)."""
    url = presign(client(), method=None)
    assert check(url, method="POST") == USER
    assert "does not match" in refused("SignatureDoesNotMatch", url, method="GET")


def test_anything_changed_after_signing_is_refused() -> None:
    url = presign(client())
    refused("SignatureDoesNotMatch", url, header="digest-2")  # the command's digest
    refused("SignatureDoesNotMatch", url, host="sts.eu-west-2.amazonaws.com")
    refused("SignatureDoesNotMatch", url.replace("X-Amz-Expires=60", "X-Amz-Expires=61"))
    refused("SignatureDoesNotMatch", url.replace("https://sts.eu-west-1.amazonaws.com/",
                                                 "https://sts.eu-west-1.amazonaws.com/x"))
    refused("SignatureDoesNotMatch", url + "&Extra=1")
    refused("SignatureDoesNotMatch", url, method="POST")
    refused("SignatureDoesNotMatch", url, header=None)  # a signed header missing
    signature = url.rsplit("=", 1)[1]
    refused("SignatureDoesNotMatch", url[:-len(signature)] + "0" * 64)
    refused("SignatureDoesNotMatch", presign(client(secret="wrong")))


def test_the_key_and_its_session_token_must_be_known() -> None:
    stranger = Principal("AKIDSTRANGER", "x", "arn:aws:iam::999999999999:user/eve")
    assert "invalid" in refused("InvalidClientTokenId", presign(client(stranger)))
    other_token = Principal(ROLE.access_key, ROLE.secret_key, ROLE.arn, session_token="tok-2")
    refused("InvalidClientTokenId", presign(client(other_token)))
    no_token = Principal(ROLE.access_key, ROLE.secret_key, ROLE.arn)
    refused("InvalidClientTokenId", presign(client(no_token)))


def test_the_scope_must_be_this_region_and_sts() -> None:
    url = presign(client(region="eu-west-2"))
    assert "valid region" in refused("SignatureDoesNotMatch", url)
    assert check(url, region="eu-west-2") == USER


def test_a_proof_expires_at_its_date_plus_its_seconds() -> None:
    url = presign(client(), expires=60)
    at = signed_at(url)
    assert check(url, now=at + timedelta(seconds=60)) == USER
    assert refused("ExpiredToken", url, now=at + timedelta(seconds=61)) == "Request has expired"
    assert check(url, now=at - timedelta(minutes=15)) == USER  # a clock behind, within skew
    assert "not yet current" in refused("SignatureDoesNotMatch", url,
                                        now=at - timedelta(minutes=15, seconds=1))


@pytest.fixture
def stand_in() -> Iterator[StsStandIn]:
    server = StsStandIn(region=REGION, registry=registry())
    server.start()
    yield server
    server.stop()


def test_over_http_boto3_reads_its_answers_as_sts_answers(stand_in: StsStandIn) -> None:
    # A header-signed POST, as boto3's own get_caller_identity sends it.
    answer = client(ROLE, endpoint=stand_in.url).get_caller_identity()
    assert (answer["Arn"], answer["Account"], answer["UserId"]) == (
        ROLE.arn, "111122223333", "AROAEXAMPLE:alice")
    with pytest.raises(ClientError) as caught:
        client(endpoint=stand_in.url, secret="wrong").get_caller_identity()
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    stand_in.clock = lambda: datetime.now(UTC) + timedelta(minutes=16)
    with pytest.raises(ClientError) as caught:
        client(endpoint=stand_in.url).get_caller_identity()
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert "Signature expired" in caught.value.response["Error"]["Message"]
