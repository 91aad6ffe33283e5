"""Webhook signing secrets at rest: sealed under a KMS key (moto over HTTP), opened by the
consumer once per data key, rotated with an overlap in which the real receiver sees both
signatures, and a KMS outage that delays a send instead of failing or unsigning it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from reminders import db, endpoints, schedules
from reminders.channels.signing import new_secret
from reminders.kms import Kms
from reminders.local import stack
from reminders.secret_box import FAILURE_HOLD_SECONDS, SecretBox
from tests.aws_principals import function_roles, secrets_key
from tests.conftest import Harness
from tests.integration.cli_helpers import Cli
from tests.integration.pipeline_helpers import attempts, delivery, tick, work


def kms_client(endpoint: str, config: Any = None, credentials: Any = None) -> Any:
    return stack.service_client("kms", endpoint, config, credentials=credentials)


def consumer_credentials(h: Harness) -> Any:
    from reminders.config import QueueUrls

    urls = QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)
    return function_roles(h.endpoint, urls)["consumer"].credentials


def writer_box(h: Harness) -> SecretBox:
    """Another process's SecretBox (the command line's): its data key is its own."""
    return SecretBox(lambda: Kms(kms_client(h.endpoint)), secrets_key(h.endpoint))


def fresh_reader(h: Harness, client: Any = None, monotonic: Any = None) -> SecretBox:
    """The consumer's SecretBox as after a cold start (with its role's KMS client): nothing
    unwrapped yet."""
    kms = Kms(client or kms_client(h.endpoint, credentials=consumer_credentials(h)))
    box = SecretBox(lambda: kms, None, **({"monotonic": monotonic} if monotonic else {}))
    h.rt.functions["consumer"].secret_box = box
    return box


def send_now(h: Harness, key: str, url: str, recipients: list[str] | None = None) -> list[str]:
    result = schedules.schedule(h.conn, tenant="acme", recipients=recipients or ["alice"],
                                channel="webhook", to=url, at=h.clock.now(),
                                now=h.clock.now(), key=key)
    tick(h)
    work(h)
    return [d.delivery_key for d in result.deliveries]


def table_text(conn: db.Connection) -> str:
    rows = conn.execute("select e::text as t from endpoints e order by id").fetchall()
    return "\n".join(r["t"] for r in rows)


def no_plaintext(text: str, *secrets: str) -> None:
    assert "whsec_" not in text
    for secret in secrets:
        body = secret.removeprefix("whsec_")
        assert body not in text and body.encode().hex() not in text


# ---------------------------------------------------------------- at rest


def test_secrets_are_stored_as_ciphertext(cli: Cli, conn: db.Connection) -> None:
    url = "https://hooks.example.com/r"
    first, second = new_secret(), new_secret()
    added = cli("endpoints", "add", url, "--secret-env", "S", "--json", S=first).json()
    assert added["url"] == url
    cli("endpoints", "rotate-secret", url, "--secret-env", "S", "--overlap", "1h", "--json",
        S=second).json()
    text = table_text(conn)
    no_plaintext(text, first, second)
    row = conn.execute("select secret, secret_key_id, next_secret_key_id, overlap_until "
                       "from endpoints").fetchone()
    assert row is not None and row["secret"] is None
    assert row["secret_key_id"] == row["next_secret_key_id"] == secrets_key(cli.env[
        "AWS_ENDPOINT_URL"])
    assert row["overlap_until"].isoformat() == "2027-03-01T10:00:00+00:00"


def test_consumer_signs_with_the_decrypted_secret(harness: Harness) -> None:
    h = harness
    url = h.receiver.hook_url("ok")
    endpoints.register(h.conn, writer_box(h), tenant=None, url=url, secret=h.receiver.secret,
                       now=h.clock.now())
    no_plaintext(table_text(h.conn), h.receiver.secret)
    fresh_reader(h)
    (key,) = send_now(h, "signed", url)
    assert delivery(h, key)["state"] == "sent"
    assert h.receiver.signers(key) == [(0,)]
    assert h.receiver.stats()["bad_signatures"] == 0


def test_a_data_key_is_unwrapped_once_per_cold_start(harness: Harness) -> None:
    h = harness
    writer = writer_box(h)
    urls = [h.receiver.hook_url(f"cache-{i}") for i in range(3)]
    for url in urls:
        endpoints.register(h.conn, writer, tenant=None, url=url, secret=h.receiver.secret,
                           now=h.clock.now())
    assert writer.kms.calls == {"GenerateDataKey": 1}  # one data key seals all three
    reader = fresh_reader(h)
    keys = []
    for round_ in range(3):  # three batches, each sending to all three endpoints
        for i, url in enumerate(urls):
            keys += send_now(h, f"cache-{round_}-{i}", url, recipients=["a", "b"])
        h.clock.advance(timedelta(minutes=1))
    assert all(delivery(h, k)["state"] == "sent" for k in keys) and len(keys) == 18
    assert reader.kms.calls == {"Decrypt": 1}
    # A second writer (another process) used another data key: one more Decrypt, once.
    other = h.receiver.hook_url("cache-other")
    endpoints.register(h.conn, writer_box(h), tenant=None, url=other,
                       secret=h.receiver.secret, now=h.clock.now())
    send_now(h, "cache-other-1", other)
    send_now(h, "cache-other-2", other)
    assert reader.kms.calls == {"Decrypt": 2}
    # A cold start unwraps again.
    again = fresh_reader(h)
    send_now(h, "cache-cold", urls[0])
    assert again.kms.calls == {"Decrypt": 1}
    assert h.receiver.stats()["bad_signatures"] == 0


# ---------------------------------------------------------------- rotation


def test_rotation_sends_both_signatures_until_the_overlap_ends(harness: Harness) -> None:
    h = harness
    writer = writer_box(h)
    url = h.receiver.hook_url("rotating")
    endpoints.register(h.conn, writer, tenant=None, url=url, secret=h.receiver.secret,
                       now=h.clock.now())
    fresh_reader(h)
    (before,) = send_now(h, "before", url)
    new = new_secret()
    rotation = endpoints.rotate(h.conn, writer, tenant=None, url=url, secret=new,
                                overlap=timedelta(hours=1), now=h.clock.now())
    assert rotation.overlap_until == h.clock.now() + timedelta(hours=1)
    assert h.receiver.accept(new) == 1
    (during,) = send_now(h, "during", url)
    h.clock.advance(timedelta(minutes=59, seconds=59))
    (late,) = send_now(h, "late-in-overlap", url)
    h.clock.advance(timedelta(seconds=1))  # the overlap ends, by the injected clock
    (after,) = send_now(h, "after", url)
    assert h.receiver.signers(before) == [(0,)]
    assert h.receiver.signers(during) == [(0, 1)]  # both present, both valid
    assert h.receiver.signers(late) == [(0, 1)]
    assert h.receiver.signers(after) == [(1,)]
    # The old secret alone would no longer verify what is sent now.
    assert h.receiver.stats()["bad_signatures"] == 0
    # A rotation after an ended overlap keeps the secret of the last one as the current.
    newer = new_secret()
    endpoints.rotate(h.conn, writer, tenant=None, url=url, secret=newer,
                     overlap=timedelta(hours=1), now=h.clock.now())
    assert h.receiver.accept(newer) == 2
    (third,) = send_now(h, "third", url)
    assert h.receiver.signers(third) == [(1, 2)]


def test_finishing_a_rotation_early_sends_the_new_signature_only(harness: Harness) -> None:
    h = harness
    writer = writer_box(h)
    url = h.receiver.hook_url("finish")
    endpoints.register(h.conn, writer, tenant=None, url=url, secret=h.receiver.secret,
                       now=h.clock.now())
    new = new_secret()
    endpoints.rotate(h.conn, writer, tenant=None, url=url, secret=new,
                     overlap=timedelta(days=2), now=h.clock.now())
    h.receiver.accept(new)
    fresh_reader(h)
    (during,) = send_now(h, "during", url)
    endpoints.finish(h.conn, tenant=None, url=url, now=h.clock.now())
    (finished,) = send_now(h, "finished", url)
    assert h.receiver.signers(during) == [(0, 1)]
    assert h.receiver.signers(finished) == [(1,)]
    row = h.conn.execute("select next_secret_ciphertext, overlap_until from endpoints "
                         "where url = %s", (url,)).fetchone()
    assert row == {"next_secret_ciphertext": None, "overlap_until": None}


def test_rotate_secret_on_the_command_line(cli: Cli) -> None:
    url = "https://hooks.example.com/r"
    cli("endpoints", "add", url, "--secret-env", "S", "--json", S=new_secret()).json()
    out = cli("endpoints", "rotate-secret", url, "--secret-env", "S", "--overlap", "2h",
              S=new_secret())
    assert (out.code, out.err) == (0, "")
    assert out.out == (f"secret rotated: {url} signs with the old and the new secret until "
                       "2027-03-01T11:00:00Z, then with the new one only\n")
    again = cli("endpoints", "rotate-secret", url, "--secret-env", "S", S=new_secret())
    assert again.code == 2
    assert again.err == (f"reminders: error: a rotation of {url} is in its overlap until "
                         "2027-03-01T11:00:00+00:00; end it first with `reminders endpoints "
                         "rotate-secret URL --finish`\n")
    mixed = cli("endpoints", "rotate-secret", url, "--finish", "--overlap", "1h")
    assert (mixed.code, mixed.err) == (2, "reminders: error: --finish takes no secret and no "
                                          "--overlap: it ends the rotation in progress\n")
    done = cli("endpoints", "rotate-secret", url, "--finish", "--json").json()
    assert done["action"] == "finish" and done["overlap_until"] is None
    nothing = cli("endpoints", "rotate-secret", url, "--finish")
    assert (nothing.code, nothing.err) == (2, f"reminders: error: no rotation of {url} to finish: "
                                              "it has one secret\n")
    at_once = cli("endpoints", "rotate-secret", url, "--secret-env", "S", "--overlap", "0",
                  "--json", S=new_secret()).json()
    assert at_once["overlap_until"] is None
    missing = cli("endpoints", "rotate-secret", url + "x", "--secret-env", "S", S=new_secret())
    assert (missing.code, missing.err) == (
        3, f"reminders: error: no endpoint {url}x registered for every tenant (no --tenant)\n")


def test_the_secret_is_never_taken_from_argv_outside_a_local_stack(cli: Cli) -> None:
    url = "https://hooks.example.com/r"
    refused = cli("endpoints", "add", url, "--secret", new_secret(),
                  AWS_ENDPOINT_URL="https://kms.eu-west-1.amazonaws.com")
    assert refused.code == 2
    assert refused.err.startswith("reminders: error: --secret is for local stacks only")
    no_key = cli("endpoints", "add", url, "--secret-env", "S", S=new_secret(),
                 REMINDERS_SECRETS_KEY_ID="")
    assert no_key.code == 2
    assert no_key.err == ("reminders: error: no KMS key to encrypt webhook secrets with: set "
                          "REMINDERS_SECRETS_KEY_ID (the stack's SecretsKeyArn output; "
                          "`reminders local up` sets a local one)\n")
    assert cli("endpoints", "list", "--json").json() == []


# ---------------------------------------------------------------- KMS outage


class Switch:
    """Routes the KMS port's calls to moto, or to a port nobody listens on (KMS unreachable)."""

    def __init__(self, endpoint: str, credentials: Any) -> None:
        from reminders.kms import client_config

        self.up = kms_client(endpoint, client_config(), credentials)
        self.gone = kms_client(f"http://127.0.0.1:{stack.free_port()}", client_config(),
                               credentials)
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.gone if self.down else self.up, name)


class Ticker:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Metrics:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float, dict[str, str]]] = []

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        self.seen.append((name, value, dimensions or {}))

    def flush(self) -> None:
        pass


def test_a_kms_outage_retries_the_send_and_never_sends_unsigned(harness: Harness) -> None:
    h = harness
    url = h.receiver.hook_url("outage")
    endpoints.register(h.conn, writer_box(h), tenant=None, url=url, secret=h.receiver.secret,
                       now=h.clock.now())
    switch, ticker = Switch(h.endpoint, consumer_credentials(h)), Ticker()
    reader = fresh_reader(h, switch, ticker)
    metrics = Metrics()
    h.rt.metrics = metrics
    switch.down = True
    (key, other) = send_now(h, "outage", url, recipients=["alice", "bob"])
    for one in (key, other):
        row = delivery(h, one)
        assert row["state"] == "retrying", row
        (attempt,) = attempts(h, one)
        assert attempt["outcome"] == "transient"
        assert attempt["detail"].startswith("webhook secret unavailable, nothing sent: KMS "
                                            "Decrypt with key arn:aws:kms:")
    assert h.receiver.stats()["requests"] == {}  # nothing left unsigned, nothing left at all
    assert ("SendConfigErrors", 2, {"channel": "webhook"}) in metrics.seen
    assert reader.kms.calls == {"Decrypt": 1}  # the batch's two sends asked KMS once
    # KMS is back; once the failure is no longer held, the retry is signed and sent.
    switch.down = False
    ticker.now += FAILURE_HOLD_SECONDS
    h.clock.advance(timedelta(hours=2))
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == delivery(h, other)["state"] == "sent"
    assert h.receiver.signers(key) == [(0,)]
    assert reader.kms.calls == {"Decrypt": 2}


# ---------------------------------------------------------------- migration path


OLD_CODE_ADD = ("insert into endpoints (tenant, url, secret) values (%s, %s, %s) "
                "on conflict (coalesce(tenant, ''), url) do update set secret = excluded.secret "
                "returning id, tenant, url")  # endpoint_add before migration 0008
OLD_CODE_READ = "select secret from endpoints where url = %s"  # recheck_load's, before 0008


def test_old_code_keeps_working_and_its_rows_are_encrypted_in_batches(
        harness: Harness, cli: Cli) -> None:
    h = harness
    urls = [h.receiver.hook_url(f"legacy-{i}") for i in range(3)]
    for url in urls:
        h.conn.execute(OLD_CODE_ADD, (None, url, h.receiver.secret))
        assert h.conn.execute(OLD_CODE_READ, (url,)).fetchone() == {
            "secret": h.receiver.secret}
    fresh_reader(h)
    (legacy,) = send_now(h, "legacy", urls[0])  # new code signs a plaintext row too
    assert h.receiver.signers(legacy) == [(0,)]

    env: dict[str, str] = {}  # the command line works on the harness's database
    first = cli("endpoints", "encrypt-secrets", "--batch", "2", "--max-batches", "1",
                "--json", **env)
    assert first.code == 1 and first.err == ""
    assert json.loads(first.out) == {"encrypted": 2, "batches": 1, "remaining": 1}
    second = cli("endpoints", "encrypt-secrets", "--batch", "2", **env)
    assert (second.code, second.out, second.err) == (
        0, "encrypted 1 secrets in 1 batches; 0 still in plaintext\n", "")
    no_plaintext(table_text(h.conn), h.receiver.secret)
    assert h.conn.execute("select count(*) as n from endpoints where secret_ciphertext is "
                          "null").fetchone() == {"n": 0}
    for i, url in enumerate(urls):
        (key,) = send_now(h, f"encrypted-{i}", url)
        assert h.receiver.signers(key) == [(0,)]
    bad = cli("endpoints", "encrypt-secrets", "--batch", "0", **env)
    assert bad.code == 2 and "--batch" in bad.err
