"""Webhook channel: one signed POST per attempt, classified honestly.

The receiver deduplicates on ``webhook-id`` / ``Idempotency-Key`` (the delivery key), so a resend
after an ``unknown`` outcome is safe. HTTP is stdlib only; the connection goes to an address the
guard in :mod:`reminders.channels.addresses` vetted, never to a second DNS answer.

Each send has one wall-clock deadline (``send_timeout``) over resolving, connecting, writing the
request and reading the whole response. The connect and read timeouts bound each single wait;
the deadline bounds their sum, so a receiver dripping its answer a byte at a time cannot hold a
send (and the consumer's invocation) for longer than the deadline.
"""

from __future__ import annotations

import dataclasses
import http.client
import io
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import partial
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from reminders import __version__
from reminders.channels import signing
from reminders.channels.addresses import (
    DestinationLookupError,
    DestinationRefused,
    IPAddress,
    IPNetwork,
    Resolver,
    check_destination,
    parse_allow_entries,
    resolve_host,
)
from reminders.channels.base import Message, Outcome, SendResult
from reminders.clock import require_aware
from reminders.errors import InvalidInput

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

EVENT_TYPE = "reminder.due"
USER_AGENT = f"reminders/{__version__}"
MAX_RESPONSE_BYTES = 64 * 1024
IO_CHUNK = 16 * 1024  # at most this much per socket read or write; the deadline is checked between
RESPONSE_SNIPPET_CHARS = 512
# A Retry-After further ahead than this is read as this far: beyond any maximum retry delay (so
# the retry policy still sees the receiver asked for a long wait, and caps it), and near enough
# that no date arithmetic can overflow, whatever digits or year a receiver sends.
MAX_RETRY_AFTER = timedelta(days=365)

_RETRY_AFTER_STATUSES = frozenset({429, 503})
_TRANSIENT_4XX = frozenset({408, 425, 429})


def webhook_body(message: Message) -> bytes:
    """The JSON body, serialised once: these exact bytes are signed and sent."""
    occurrence = require_aware(message.occurrence_at, "occurrence_at").astimezone(UTC)
    document: dict[str, Any] = {
        "type": EVENT_TYPE,
        "delivery_key": message.delivery_key,
        "tenant": message.tenant,
        "kind": message.kind,
        "recipient": message.recipient,
        "revision": message.revision,
        "occurrence_at": occurrence.isoformat().replace("+00:00", "Z"),
        "attempt": message.attempt,
        "payload": message.payload,
    }
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def parse_retry_after(value: str | None, now: datetime) -> datetime | None:
    """An absolute UTC instant from a Retry-After header (delta-seconds or HTTP-date), else None.

    The answer lies between ``now`` (a date already past) and ``now + MAX_RETRY_AFTER``.
    """
    if value is None:
        return None
    now = require_aware(now, "now").astimezone(UTC)
    text = value.strip()
    limit = MAX_RETRY_AFTER.total_seconds()
    if text.isascii() and text.isdigit():
        # Compared as digits first: int() of thousands of them is refused or slow.
        seconds = int(text) if len(text) <= len(str(int(limit))) else limit + 1
        return now + timedelta(seconds=min(seconds, limit))
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:  # "-0000" means UTC with no claim about the local zone
        parsed = parsed.replace(tzinfo=UTC)
    # The difference of two aware instants cannot overflow; converting year 9999 at -0100 to
    # UTC can.
    wait = parsed - now
    return now + min(max(wait, timedelta(0)), MAX_RETRY_AFTER)


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    host_header: str
    path: str


def _parse_url(url: str) -> _Target:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"invalid webhook URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidInput(f"unsupported URL scheme {scheme or '(none)'!r}: only http and https")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("credentials in the webhook URL are not supported")
    host = parts.hostname
    if not host:
        raise InvalidInput("webhook URL has no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidInput(f"webhook URL host {host!r} is not a valid domain name") from None
    default_port = 443 if scheme == "https" else 80
    netloc_host = f"[{host}]" if ":" in host else host
    host_header = netloc_host if port in (None, default_port) else f"{netloc_host}:{port}"
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return _Target(scheme, host, port or default_port, host_header, path)


class _DeadlineHit(TimeoutError):
    """The send's deadline passed (rather than one wait's connect or read timeout)."""


class _Deadline:
    def __init__(self, seconds: float, monotonic: Callable[[], float]) -> None:
        self.seconds = seconds
        self._monotonic = monotonic
        self._at = monotonic() + seconds

    def timeout(self, per_wait: float) -> tuple[float, bool]:
        """The timeout for the next wait, and whether it is the deadline that sets it.

        Raises :class:`_DeadlineHit` once no time is left.
        """
        left = self._at - self._monotonic()
        if left <= 0:
            raise _DeadlineHit(f"send deadline of {self.seconds}s hit")
        return (left, True) if left < per_wait else (per_wait, False)


class _DeadlineSocket:
    """The connected socket as :mod:`http.client` sees it: each read and write moves at most
    ``IO_CHUNK`` bytes and waits at most the read timeout or what is left of the deadline,
    whichever is shorter. Closing it is left to :meth:`WebhookChannel.send`, which owns the
    socket (http.client closes the connection before the body of a ``Connection: close``
    answer has been read)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline, per_wait: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._per_wait = per_wait

    def _wait(self, op: Callable[[], int]) -> int:
        timeout, deadline_sets_it = self._deadline.timeout(self._per_wait)
        self._sock.settimeout(timeout)
        try:
            return op()
        except TimeoutError:
            if deadline_sets_it:
                raise _DeadlineHit(f"send deadline of {self._deadline.seconds}s hit") from None
            raise

    def sendall(self, data: ReadableBuffer) -> None:
        # Not the socket's own sendall: an SSL socket's restarts its timeout for every piece.
        with memoryview(data) as view, view.cast("B") as octets:
            done = 0
            while done < len(octets):
                done += self._wait(partial(self._sock.send, octets[done:done + IO_CHUNK]))

    def recv_into(self, buffer: WriteableBuffer) -> int:
        with memoryview(buffer) as view, view.cast("B") as octets:
            return self._wait(partial(self._sock.recv_into, octets[:IO_CHUNK]))

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"only 'rb' is supported, not {mode!r}")
        return io.BufferedReader(_DeadlineReader(self), IO_CHUNK)

    def close(self) -> None:
        pass


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        return self._sock.recv_into(buffer)


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class WebhookChannel:
    """POSTs a signed ``reminder.due`` event to the destination URL."""

    name = "webhook"
    honours_idempotency_key = True

    def __init__(
        self,
        allow: Iterable[str | IPNetwork] = (),
        connect_timeout: float = 3.0,
        read_timeout: float = 10.0,
        send_timeout: float = 15.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        resolver: Resolver = resolve_host,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if connect_timeout <= 0 or read_timeout <= 0 or send_timeout <= 0:
            raise InvalidInput("webhook timeouts must be positive")
        self.allow: list[IPNetwork] = parse_allow_entries(allow)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        # The longest one send can take, end to end: a caller keeps at least this much of its
        # own time (a Lambda invocation's) before starting one.
        self.send_timeout: float = send_timeout
        self._ssl_context = ssl_context
        self._resolver = resolver
        self._max_response_bytes = max_response_bytes
        # Deadlines are durations measured on this host, not instants: the injected Clock of
        # the rest of the system may stand still (tests, the demo) while a socket waits.
        self._monotonic = monotonic

    def send(self, message: Message, now: datetime) -> SendResult:
        now = require_aware(now, "now").astimezone(UTC)
        deadline = _Deadline(self.send_timeout, self._monotonic)
        try:
            target = _parse_url(message.destination)
            if not message.secrets:
                raise InvalidInput("no signing secret for this webhook endpoint")
            for secret in message.secrets:
                signing.validate_secret(secret)
            body = webhook_body(message)
        except InvalidInput as exc:
            return SendResult(Outcome.PERMANENT, _one_line(str(exc)))
        except (TypeError, ValueError) as exc:
            return SendResult(Outcome.PERMANENT, _one_line(f"payload is not JSON: {exc}"))
        try:
            addresses = check_destination(target.host, target.port, self.allow, self._resolver)
        except DestinationRefused as exc:
            return SendResult(Outcome.PERMANENT, str(exc))
        except DestinationLookupError as exc:
            return SendResult(Outcome.TRANSIENT, _one_line(str(exc)))

        timestamp = int(now.timestamp())
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": message.delivery_key,
            signing.HEADER_ID: message.delivery_key,
            signing.HEADER_TIMESTAMP: str(timestamp),
            signing.HEADER_SIGNATURE: signing.sign_all(
                message.secrets, message.delivery_key, timestamp, body
            ),
            "Connection": "close",
        }
        connected = self._connect(target, addresses, deadline)
        if isinstance(connected, SendResult):
            return connected
        sock, address = connected
        conn = http.client.HTTPConnection(str(address), target.port, timeout=self.read_timeout)
        # Duck-typed: http.client only calls sendall, makefile("rb") and close on it.
        conn.sock = cast(socket.socket, _DeadlineSocket(sock, deadline, self.read_timeout))
        try:
            return self._exchange(conn, target, headers, body, now)
        finally:
            conn.close()
            sock.close()

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:  # made on first use: loading the CA bundle takes time
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _connect(
        self, target: _Target, addresses: list[IPAddress], deadline: _Deadline
    ) -> tuple[socket.socket, IPAddress] | SendResult:
        """Open a connection to the first vetted address that answers; nothing is sent yet."""
        failure = "no address to connect to"
        for address in addresses:
            where = f"{address}:{target.port}"
            try:
                timeout, deadline_sets_it = deadline.timeout(self.connect_timeout)
            except _DeadlineHit:
                return SendResult(
                    Outcome.TRANSIENT,
                    f"send deadline of {self.send_timeout}s hit before a connection was made; "
                    "nothing was sent",
                )
            try:
                sock = socket.create_connection((str(address), target.port), timeout)
            except TimeoutError:
                if deadline_sets_it:
                    return self._late_connect(where)
                failure = f"connect timeout after {self.connect_timeout}s to {where}"
                continue
            except ConnectionRefusedError:
                failure = f"connection refused by {where}"
                continue
            except OSError as exc:
                failure = _one_line(f"cannot connect to {where}: {exc.strerror or exc}")
                continue
            if target.scheme == "https":
                try:
                    timeout, deadline_sets_it = deadline.timeout(self.connect_timeout)
                except _DeadlineHit:
                    sock.close()
                    return self._late_connect(where)
                sock.settimeout(timeout)  # one bound for the whole handshake
                try:
                    sock = self._tls().wrap_socket(sock, server_hostname=target.host)
                except (OSError, ssl.SSLError) as exc:
                    sock.close()
                    if isinstance(exc, TimeoutError) and deadline_sets_it:
                        return self._late_connect(where)
                    return SendResult(
                        Outcome.TRANSIENT, _one_line(f"TLS handshake with {where} failed: {exc}")
                    )
            return sock, address
        return SendResult(Outcome.TRANSIENT, failure)

    def _late_connect(self, where: str) -> SendResult:
        return SendResult(
            Outcome.TRANSIENT,
            f"send deadline of {self.send_timeout}s hit while connecting to {where}; "
            "nothing was sent",
        )

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        target: _Target,
        headers: dict[str, str],
        body: bytes,
        now: datetime,
    ) -> SendResult:
        try:
            conn.request("POST", target.path, body=body, headers=headers)
        except ValueError as exc:
            # http.client refuses a control character in the path or a header before writing.
            return SendResult(Outcome.PERMANENT, _one_line(f"invalid request: {exc}"))
        except _DeadlineHit:
            # Cut off before or while writing: the receiver cannot act on a request it did not
            # get in full.
            return SendResult(
                Outcome.TRANSIENT,
                f"send deadline of {self.send_timeout}s hit while writing the request; "
                "it was not completely sent",
            )
        except OSError as exc:
            # The request was not completely written, so the receiver cannot have acted on it.
            return SendResult(
                Outcome.TRANSIENT, _one_line(f"connection failed while sending: {exc}")
            )
        try:
            response = conn.getresponse()
        except _DeadlineHit:
            return SendResult(
                Outcome.UNKNOWN,
                f"send deadline of {self.send_timeout}s hit while waiting for the response; "
                "the request was sent",
            )
        except TimeoutError:
            return SendResult(
                Outcome.UNKNOWN,
                f"no response within {self.read_timeout}s (read timeout); the request was sent",
            )
        except (OSError, http.client.HTTPException) as exc:
            kind = type(exc).__name__
            return SendResult(
                Outcome.UNKNOWN,
                _one_line(f"connection lost after the request was sent ({kind}: {exc})"),
            )
        cut_off = False
        try:
            snippet = response.read(self._max_response_bytes)
        except _DeadlineHit:
            snippet, cut_off = b"", True
        except (OSError, http.client.HTTPException):
            snippet = b""
        result = self._classify(response, snippet, now)
        if cut_off:  # the status is the answer; only the body was lost
            result = dataclasses.replace(result, detail=(
                f"{result.detail}; response body cut off at the {self.send_timeout}s "
                "send deadline"))
        return result

    def _classify(
        self, response: http.client.HTTPResponse, snippet: bytes, now: datetime
    ) -> SendResult:
        status = response.status
        try:
            reason = response.reason or HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        detail = _one_line(f"HTTP {status} {reason}".strip())
        extra: dict[str, Any] = {}
        if snippet:
            extra["response_body"] = snippet.decode("utf-8", "replace")[:RESPONSE_SNIPPET_CHARS]
        retry_after = None
        if status in _RETRY_AFTER_STATUSES:
            retry_after = parse_retry_after(response.getheader("Retry-After"), now)

        if 200 <= status < 300:
            outcome = Outcome.SENT
        elif 300 <= status < 400:
            outcome = Outcome.PERMANENT
            detail = f"{detail}: redirect not followed"
            location = response.getheader("Location")
            if location:
                extra["location"] = location
        elif status in _TRANSIENT_4XX or 500 <= status < 600:
            outcome = Outcome.TRANSIENT
        elif 400 <= status < 500:
            outcome = Outcome.PERMANENT
        else:
            # A response arrived but its meaning is undefined: the receiver may have acted.
            outcome = Outcome.UNKNOWN
            detail = f"{detail}: unexpected status"
        return SendResult(outcome, detail, status_code=status, retry_after=retry_after, extra=extra)
