"""The identity proof: presigned for the GET the operations function sends, bound to the
command's digest, and accepted only for this partition's STS hosts in the function's region."""

from __future__ import annotations

from reminders import identity
from tests.unit.test_sts_server import USER, check, client, refused


def test_presign_signs_the_get_that_verify_sends_bound_to_the_digest() -> None:
    digest = identity.request_digest("cancel", {"key": "inv-1"})
    url = identity.presign(client(), digest)
    assert check(url, header=digest) == USER
    other = identity.request_digest("cancel", {"key": "inv-2"})
    refused("SignatureDoesNotMatch", url, header=other)
    assert "X-Amz-Expires=60" in url
