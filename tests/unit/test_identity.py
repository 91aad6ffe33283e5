"""The identity proof: presigned for the GET the operations function sends, bound to the
command's digest, and accepted only for this partition's STS hosts in the function's region."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from reminders import aws, identity
from reminders.errors import ConfigError, InvalidInput
from tests.unit.test_sts_server import USER, check, client, refused

AUDIENCE = "arn:aws:lambda:eu-west-1:111122223333:function:Reminders-ops-write"
NONCE = "0123456789abcdef0123456789abcdef"


def digest(command: str, arguments: dict[str, Any], *, audience: str = AUDIENCE,
           nonce: str = NONCE) -> str:
    return identity.request_digest(command, arguments, audience=audience, nonce=nonce)


def now() -> datetime:
    return datetime.now(UTC)


def test_presign_signs_the_get_that_verify_sends_bound_to_the_digest() -> None:
    signed = digest("cancel", {"key": "inv-1"})
    url = identity.presign(client(), signed)
    assert check(url, header=signed) == USER
    for other in (digest("cancel", {"key": "inv-2"}),
                  digest("cancel", {"key": "inv-1"}, audience=AUDIENCE.replace("write", "read")),
                  digest("cancel", {"key": "inv-1"}, nonce="f" * 32)):
        refused("SignatureDoesNotMatch", url, header=other)
    assert "X-Amz-Expires=60" in url


def test_the_digest_covers_the_audience_and_the_nonce() -> None:
    base = digest("status", {})
    assert len({base, digest("status", {}, audience=AUDIENCE + "x"),
                digest("status", {}, nonce=NONCE[::-1]), digest("status", {"tenant": None})}) == 4
    assert identity.new_nonce() != identity.new_nonce()
    assert identity.check_nonce(identity.new_nonce())
    for bad in (None, "", "abc", "G" * 32, NONCE.upper(), "0" * 65):
        with pytest.raises(identity.IdentityRefused, match=r"identity\.nonce must be 32 to 64"):
            identity.check_nonce(bad)


def test_the_audience_is_the_functions_unqualified_arn() -> None:
    arn = "arn:aws:lambda:eu-west-1:111122223333:function:Reminders-ops-read"
    assert identity.audience_of(arn) == arn
    assert identity.audience_of(arn + ":live") == arn  # an alias or a version: the function
    assert identity.audience_of(arn + ":$LATEST") == arn
    assert identity.function_arn("Reminders-ops-read", partition="aws", region="eu-west-1",
                                 account="111122223333") == arn
    assert identity.function_arn(arn + ":7", partition="aws-cn", region="x",
                                 account="1") == arn
    with pytest.raises(identity.IdentityRefused, match="the function's own ARN cannot be read"):
        identity.audience_of("")
    with pytest.raises(InvalidInput, match="not a function name or ARN"):
        identity.function_arn("a/b", partition="aws", region="eu-west-1", account="1")


def test_a_proof_is_good_for_120_s_at_most_by_the_functions_clock() -> None:
    url = identity.presign(client(), digest("status", {}))
    signed_at = identity.check_proof(url, EU, now=now())
    assert abs((now() - signed_at).total_seconds()) < 60
    assert identity.remembered_until(signed_at) == signed_at + timedelta(seconds=120)
    identity.check_proof(url, EU, now=signed_at + timedelta(seconds=120))
    identity.check_proof(url, EU, now=signed_at - timedelta(seconds=120))
    with pytest.raises(identity.IdentityRefused, match="signed 121 s ago"):
        identity.check_proof(url, EU, now=signed_at + timedelta(seconds=121))
    with pytest.raises(identity.IdentityRefused, match="signed 121 s ahead of the function's"):
        identity.check_proof(url, EU, now=signed_at - timedelta(seconds=121))
    for seconds in (121, 900):
        longer = identity.presign(client(), digest("status", {}), seconds=seconds)
        with pytest.raises(identity.IdentityRefused,
                           match=re.escape(f"must expire within 120 s (X-Amz-Expires "
                                           f"'{seconds}')")):
            identity.check_proof(longer, EU, now=now())
    undated = url.replace("X-Amz-Date=", "X-Amz-Dat=")
    with pytest.raises(identity.IdentityRefused):
        identity.check_proof(undated, EU, now=now())


# ---------------------------------------------------------------- which STS hosts: the function


def proof_to(origin: str) -> str:
    """A well-formed proof, sent to ``origin`` (scheme and host as a caller wrote them)."""
    url = identity.presign(client(), digest("status", {}))
    return origin + url[len("https://sts.eu-west-1.amazonaws.com"):]


EU = "https://sts.eu-west-1.amazonaws.com"


@pytest.mark.parametrize(("endpoint", "origin"), [
    (EU, EU),
    (EU, "https://sts-fips.eu-west-1.amazonaws.com"),
    (EU, "https://sts.eu-west-1.api.aws"),
    ("https://sts.us-gov-west-1.amazonaws.com", "https://sts-fips.us-gov-west-1.amazonaws.com"),
    ("https://sts.cn-north-1.amazonaws.com.cn", "https://sts.cn-north-1.amazonaws.com.cn"),
    ("https://sts.cn-north-1.amazonaws.com.cn",
     "https://sts.cn-north-1.api.amazonwebservices.com.cn"),
    ("http://127.0.0.1:4566", "http://127.0.0.1:4566"),  # the local stand-in
])
def test_the_function_accepts_its_regions_regional_fips_and_dual_stack_hosts(
        endpoint: str, origin: str) -> None:
    identity.check_proof(proof_to(origin), endpoint, now=now())


@pytest.mark.parametrize(("endpoint", "origin"), [
    (EU, "https://sts.eu-west-2.amazonaws.com"),  # another region
    (EU, "https://sts-fips.eu-west-2.amazonaws.com"),
    (EU, "https://sts.eu-west-2.api.aws"),
    (EU, "https://sts.amazonaws.com"),  # the global host
    (EU, "https://sts.eu-west-1.amazonaws.com.evil.example"),  # lookalikes
    (EU, "https://sts.eu-west-1.api.aws.evil.example"),
    (EU, "https://evil.example#sts.eu-west-1.amazonaws.com"),
    (EU, "https://sts.eu-west-1.amazonaws.com."),
    (EU, "https://sts.eu-west-1.amazonaws.com.cn"),  # another partition
    (EU, "https://sts-fips.eu-west-1.api.aws"),  # FIPS and dual-stack at once: not offered
    (EU, "http://sts.eu-west-1.amazonaws.com"),  # no TLS
    (EU, "http://sts.eu-west-1.api.aws"),
    (EU, "https://user@sts.eu-west-1.amazonaws.com"),  # userinfo
    (EU, "https://user:pw@sts.eu-west-1.amazonaws.com"),
    (EU, "https://sts.eu-west-1.amazonaws.com:443"),  # ports, even the default one
    (EU, "https://sts-fips.eu-west-1.amazonaws.com:8443"),
    (EU, "https://sts.eu-west-1.api.aws:443"),
    ("https://sts.cn-north-1.amazonaws.com.cn", "https://sts-fips.cn-north-1.amazonaws.com.cn"),
    ("https://sts.cn-north-1.amazonaws.com.cn", "https://sts.cn-north-1.api.aws"),
    ("http://127.0.0.1:4566", "http://127.0.0.1:4567"),
    ("http://127.0.0.1:4566", "https://sts.us-east-1.amazonaws.com"),
])
def test_the_function_refuses_every_other_host(endpoint: str, origin: str) -> None:
    with pytest.raises(identity.IdentityRefused) as caught:
        identity.check_proof(proof_to(origin), endpoint, now=now())
    assert str(caught.value).startswith(f"identity: the proof is not a request to {endpoint}")


# ---------------------------------------------------------------- which STS host: the command line


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """Credentials and nothing else: no endpoint override, no profile."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                 "AWS_STS_REGIONAL_ENDPOINTS", "AWS_USE_FIPS_ENDPOINT",
                 "AWS_USE_DUALSTACK_ENDPOINT", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", USER.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", USER.secret_key)
    return monkeypatch


# eu-west-1 and us-east-1 are regions botocore's legacy mode signs for sts.amazonaws.com;
# eu-central-2 came later and is always regional.
@pytest.mark.parametrize("region", ["eu-west-1", "us-east-1", "eu-central-2"])
@pytest.mark.parametrize("mode", ["legacy", "regional", None])
def test_the_command_line_presigns_for_the_regions_own_sts_host(
        aws_env: pytest.MonkeyPatch, region: str, mode: str | None) -> None:
    if mode:
        aws_env.setenv("AWS_STS_REGIONAL_ENDPOINTS", mode)
    aws_env.setenv("AWS_DEFAULT_REGION", "ap-south-1")  # the region given wins
    url = identity.presign(aws.sts_client(region), digest("status", {}))
    assert urlsplit(url).netloc == f"sts.{region}.amazonaws.com"
    assert f"%2F{region}%2Fsts%2F" in url  # the credential scope
    identity.check_proof(url, f"https://sts.{region}.amazonaws.com", now=now())


@pytest.mark.parametrize(("setting", "host"), [
    ("AWS_USE_FIPS_ENDPOINT", "sts-fips.us-east-1.amazonaws.com"),
    ("AWS_USE_DUALSTACK_ENDPOINT", "sts.us-east-1.api.aws"),
])
def test_a_fips_or_dual_stack_proof_is_one_the_function_accepts(
        aws_env: pytest.MonkeyPatch, setting: str, host: str) -> None:
    aws_env.setenv(setting, "true")
    url = identity.presign(aws.sts_client("us-east-1"), digest("status", {}))
    assert urlsplit(url).netloc == host
    identity.check_proof(url, "https://sts.us-east-1.amazonaws.com", now=now())


def test_the_command_lines_region_is_the_one_boto3_gives_its_other_clients(
        aws_env: pytest.MonkeyPatch) -> None:
    aws_env.setenv("AWS_DEFAULT_REGION", "eu-central-2")
    assert aws.region() == "eu-central-2"
    aws_env.delenv("AWS_DEFAULT_REGION")
    aws_env.setenv("AWS_REGION", "eu-west-1")  # what the README tells operators to set
    assert aws.region() == "eu-west-1"
    assert aws.client("cloudformation").meta.region_name == "eu-west-1"
    aws_env.delenv("AWS_REGION")
    with pytest.raises(ConfigError, match="no AWS region: set AWS_REGION or AWS_DEFAULT_REGION"):
        aws.region()


def test_an_assumed_role_is_recorded_as_its_role_and_its_session_name_apart() -> None:
    """The session name of an assumed role is whatever its caller chose, unless the role's
    trust policy pins sts:RoleSessionName: it is kept apart from the role, and said so."""
    from reminders.identity import Caller

    caller = Caller("arn:aws:sts::111122223333:assumed-role/ops-admins/alice@example.com",
                    "111122223333")
    assert caller.principal == {
        "role": "arn:aws:iam::111122223333:role/ops-admins",
        "session": "alice@example.com",
        "session_named_by": "the caller, unless the role's trust policy pins "
                            "sts:RoleSessionName"}
    user = Caller("arn:aws:iam::111122223333:user/bob", "111122223333")
    assert user.principal == {"principal": "arn:aws:iam::111122223333:user/bob"}
