"""Webhook channel: one signed POST per attempt, classified honestly.

The receiver deduplicates on ``webhook-id`` / ``Idempotency-Key`` (the delivery key), so a resend
after an ``unknown`` outcome is safe. HTTP is stdlib only; the connection goes to an address the
guard in :mod:`reminders.channels.addresses` vetted, never to a second DNS answer. A URL with a
control character or whitespace anywhere is refused before it is parsed (a permanent outcome
naming the part and the code point): parsers and resolvers would otherwise each read it their
own way.

Each send has one wall-clock deadline (``send_timeout``) over resolving, connecting, writing the
request and reading the whole response. The connect and read timeouts bound each single wait;
the deadline bounds their sum, so a receiver dripping its answer a byte at a time cannot hold a
send (and the consumer's invocation) for longer than the deadline.

Connections are kept alive and reused. Every send still resolves and vets its destination; a
kept connection is reused only for the same scheme, URL host and port, and only if the address
it is connected to is among the addresses this send vetted (a changed DNS answer means a new
connection to the new address). A connection is kept only after a response read to its end
(body within ``max_response_bytes``) on HTTP/1.1 with nothing said about closing, nothing left
unread, no doubt about where the answer ends (no Content-Length beside Transfer-Encoding, no two
lengths, no body announced on a 204) and no error; it is not reused after ``keep_alive_seconds``
idle, nor if it became readable while idle (the receiver closed it or sent something unasked).
A receiver's ``Keep-Alive: timeout=N`` shortens that to ``N - 1`` seconds (a margin against
racing its close), and a connection is not kept at all when that is not positive or the header
says ``max=1`` or ``max=0`` (the receiver closes after this answer); an absent or malformed
value leaves the channel's own limit.
The deadline bounds a send on a kept connection exactly as on a new one.

A receiver may close an idle connection just as a request goes out on it. When writing the
request on a kept connection fails, or the connection is closed or reset before any byte of an
answer arrived, the request is sent once more on a new connection within the same deadline. A
receiver may therefore see one request twice with the same ``webhook-id`` / ``Idempotency-Key``,
which its deduplication on that key already covers. Any other failure on a kept connection is
classified as on a new one.
"""

from __future__ import annotations

import dataclasses
import http.client
import io
import json
import select
import socket
import ssl
import threading
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
    check_url_characters,
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
# Informational answers (102 Processing, 103 Early Hints) skipped before the final one; after
# this many, the next is taken as the answer (and is unknown, as any undefined status).
MAX_INTERIM_ANSWERS = 10
# A Retry-After further ahead than this is read as this far: beyond any maximum retry delay (so
# the retry policy still sees the receiver asked for a long wait, and caps it), and near enough
# that no date arithmetic can overflow, whatever digits or year a receiver sends.
MAX_RETRY_AFTER = timedelta(days=365)

# How long a kept connection may stay idle before it is reused: below the 5 s after which common
# HTTP servers (Node.js's default) close idle connections, so a reuse rarely races their close.
KEEP_ALIVE_SECONDS = 4.0
# A receiver's ``Keep-Alive: timeout=N`` is believed less this much: a reuse just before its
# limit would race its close (gunicorn's default of 2 s leaves 1 s).
KEEP_ALIVE_MARGIN = 1.0
# Idle connections kept, per destination and in all; when full, the one idle longest is closed to
# make room. A Lambda function may hold 1,024 open descriptors: 400 kept ones leave room for
# REMINDERS_SEND_CONCURRENCY's at most 500 sends in flight on new connections, and the database
# and AWS connections, at the same time.
MAX_IDLE_PER_DESTINATION = 400
MAX_IDLE = 400

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
    # A row stored before URLs were checked on input: whitespace around it was stripped then,
    # and still is (such rows sent, and go on sending); anything left is checked.
    url = check_url_characters(url.strip(), "webhook URL")
    try:
        parts = urlsplit(url)
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


class _NotStarted(Exception):
    """A TLS connection could not be started; ``result`` says why (nothing was sent)."""

    def __init__(self, result: SendResult) -> None:
        super().__init__(result.detail)
        self.result = result


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
    """The connected socket as :mod:`http.client` sees it for one send: each read and write
    moves at most ``IO_CHUNK`` bytes and waits at most the read timeout or what is left of the
    deadline, whichever is shorter. Closing it leaves the socket open: :meth:`WebhookChannel.send`
    owns the socket, and closes it or keeps it for a later send (http.client closes the
    connection before the body of a ``Connection: close`` answer has been read)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline, per_wait: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._per_wait = per_wait
        self.received = 0  # bytes of the answer read from the socket so far
        self.reader: _ResponseReader | None = None

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
            got = self._wait(partial(self._sock.recv_into, octets[:IO_CHUNK]))
        self.received += got
        return got

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"only 'rb' is supported, not {mode!r}")
        if self.reader is None:  # one reader for every answer: a final one after interim ones
            self.reader = _ResponseReader(_DeadlineReader(self), IO_CHUNK)
        return self.reader

    def close(self) -> None:
        pass


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        super().__init__()
        self._sock = sock
        self.closing = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int | None:
        if self.closing:
            return None  # "nothing without waiting": the buffered reader peeks at its buffer only
        return self._sock.recv_into(buffer)


class _UnboundedRead(http.client.HTTPException):
    """The answer's framing asked for a read without a limit (a negative chunk size)."""


class _ResponseReader(io.BufferedReader):
    """The buffered reader http.client reads an answer with. When http.client closes it (at the
    end of the answer) it counts the bytes it had read from the socket beyond the answer: a
    connection with any is not reused.

    It refuses a read of no stated size: http.client asks for one only when a chunk size is
    negative, and would then read to the end of the stream, past ``max_response_bytes``."""

    leftover = 0

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0:
            raise _UnboundedRead("the response framing asked for a read without a limit")
        return super().read(size)

    def close(self) -> None:
        if not self.closed:
            raw = self.raw
            if isinstance(raw, _DeadlineReader):
                raw.closing = True
            self.leftover = len(self.peek())
        super().close()


def _quiet(sock: socket.socket) -> bool:
    """Whether an idle connection has nothing to read: no bytes, no end of stream, no error.
    An idle keep-alive connection that is readable was closed by the receiver or got bytes
    nobody asked for; either way it cannot carry another request."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    poller = select.poll()  # not select.select: descriptors above FD_SETSIZE are fine
    try:
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


_Destination = tuple[str, str, int, IPAddress]  # scheme, host as in the URL, port, connected IP


class _KeptConnections:
    """Idle connections that answered cleanly, per destination; shared by the send threads."""

    def __init__(self, keep_seconds: float, per_destination: int, total: int,
                 monotonic: Callable[[], float]) -> None:
        self._keep_seconds = keep_seconds
        self._per_destination = per_destination
        self._total = total
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # Oldest first: a connection is given back after every one already there.
        # Each with the monotonic time it was kept at and for how long it may be kept.
        self._idle: dict[_Destination, list[tuple[socket.socket, float, float]]] = {}
        self._count = 0
        self._swept = monotonic()

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def take(self, scheme: str, host: str, port: int,
             addresses: Iterable[IPAddress]) -> tuple[socket.socket, IPAddress] | None:
        """The most recently kept connection to one of ``addresses`` that is fresh and quiet;
        stale ones met on the way are closed."""
        stale: list[socket.socket] = []
        try:
            for address in addresses:
                key = (scheme, host, port, address)
                while True:  # ends: each turn removes a connection from the bounded pool
                    with self._lock:
                        entries = self._idle.get(key)
                        if not entries:
                            break
                        sock, since, keep_for = entries.pop()
                        self._count -= 1
                        # Each is kept for its own time (the receiver's Keep-Alive may shorten
                        # it): an older one may still be fresh when a newer one is not.
                        too_old = self._monotonic() - since > keep_for
                        if not entries:
                            del self._idle[key]
                    if too_old or not _quiet(sock):
                        stale.append(sock)
                        continue
                    return sock, address
            return None
        finally:
            for sock in stale:
                sock.close()

    def give_back(self, key: _Destination, sock: socket.socket, keep_for: float) -> bool:
        """Keep ``sock`` for a later send to ``key`` for at most ``keep_for`` seconds idle
        (capped at the pool's own limit), closing the connection idle longest (of this
        destination, or of all when the pool is full) to make room; False (the caller closes
        it) when it is not quiet or nothing may be kept."""
        keep_for = min(keep_for, self._keep_seconds)
        if (keep_for <= 0 or self._per_destination <= 0 or self._total <= 0
                or not _quiet(sock)):
            return False
        closing: list[socket.socket] = []
        try:
            with self._lock:
                now = self._monotonic()
                if now - self._swept > self._keep_seconds:
                    # Connections to destinations no longer sent to are closed too, not left
                    # holding descriptors until the pool is full.
                    self._swept = now
                    for other in self._idle.values():
                        closing.extend(self._expire(other, now))
                    self._idle = {k: v for k, v in self._idle.items() if v}
                entries = self._idle.setdefault(key, [])
                closing.extend(self._expire(entries, now))
                if len(entries) >= self._per_destination:
                    closing.append(entries.pop(0)[0])
                    self._count -= 1
                while self._count >= self._total:  # ends: each turn closes a kept connection
                    oldest = min((k for k, v in self._idle.items() if v),
                                 key=lambda k: self._idle[k][0][1])
                    closing.append(self._idle[oldest].pop(0)[0])
                    self._count -= 1
                    if not self._idle[oldest] and oldest != key:
                        del self._idle[oldest]
                entries.append((sock, now, keep_for))
                self._count += 1
                return True
        finally:
            for old in closing:
                old.close()

    def _expire(self, entries: list[tuple[socket.socket, float, float]],
                 now: float) -> list[socket.socket]:
        """Remove from ``entries`` those idle longer than each may be kept; the caller holds
        the lock and closes them."""
        gone = [sock for sock, since, keep_for in entries if now - since > keep_for]
        if gone:
            entries[:] = [entry for entry in entries if now - entry[1] <= entry[2]]
            self._count -= len(gone)
        return gone

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._count = self._idle, {}, 0
        for entries in idle.values():
            for sock, _, _ in entries:
                sock.close()


# What a kept connection the receiver closed as the request arrived raises while the answer is
# awaited (http.client's RemoteDisconnected is a ConnectionResetError).
_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True)
class _Try:
    """One request on one connection: its result (None when a kept connection turned out to be
    closed before answering, so the request goes again on a new one), whether the request was
    written in full, and whether the connection may carry another request."""

    result: SendResult | None
    written: bool = False
    clean: bool = False
    keep_for: float = 0.0  # how long the connection may then stay idle, if clean


def _reusable(response: http.client.HTTPResponse) -> bool:
    """Whether a response read without error leaves its connection ready for another request:
    an HTTP/1.1 answer with a status, read to its very end, and nothing said about closing."""
    if not 200 <= response.status < 600 or response.version != 11 or response.will_close:
        return False
    tokens = (response.getheader("Connection") or "").lower().replace(",", " ").split()
    if "close" in tokens:
        return False
    if not response.isclosed():
        return False  # body left unread (longer than max_response_bytes)
    if not _framed(response):
        return False
    # http.client also marks the body done at an early end of stream with bytes still owed.
    return bool(response.chunked) or response.length == 0


def _framed(response: http.client.HTTPResponse) -> bool:
    """Whether where the answer ends is beyond doubt. Not when it carries both Content-Length
    and Transfer-Encoding, or two different lengths, or is a 204 announcing a body: http.client
    picks one reading, and bytes the receiver meant as part of this answer would be read as the
    start of the next one."""
    encoding = response.getheader("Transfer-Encoding")
    lengths = {value.strip() for value in response.msg.get_all("Content-Length") or ()}
    if (encoding is not None and lengths) or len(lengths) > 1:
        return False
    return response.status != 204 or (encoding is None and lengths <= {"0"})


def receiver_keep_alive(values: Iterable[str]) -> float | None:
    """How long a connection may stay idle by the receiver's ``Keep-Alive`` header values
    (``timeout=N, max=M``): ``N - KEEP_ALIVE_MARGIN`` seconds, 0 (not kept) when that is not
    positive or when ``M <= 1`` (the receiver closes after this answer), None when the header
    says nothing usable (absent or malformed: the channel's own limit applies). Names and
    spacing in any case; several values of one parameter: the strictest. Never raises."""
    timeouts: list[int] = []
    maxes: list[int] = []
    for value in values:
        for part in value.split(","):
            name, equals, text = part.partition("=")
            text = text.strip()
            if len(text) >= 2 and text[0] == text[-1] == '"':
                text = text[1:-1].strip()
            # At most 9 digits: int() of thousands of them is slow; a longer one is ignored.
            if not equals or not (text.isascii() and text.isdigit()) or len(text) > 9:
                continue
            name = name.strip().lower()
            if name == "timeout":
                timeouts.append(int(text))
            elif name == "max":
                maxes.append(int(text))
    if maxes and min(maxes) <= 1:
        return 0.0
    if timeouts:
        return max(0.0, min(timeouts) - KEEP_ALIVE_MARGIN)
    return None


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
        keep_alive_seconds: float = KEEP_ALIVE_SECONDS,
        max_idle_per_destination: int = MAX_IDLE_PER_DESTINATION,
        max_idle: int = MAX_IDLE,
    ) -> None:
        if connect_timeout <= 0 or read_timeout <= 0 or send_timeout <= 0:
            raise InvalidInput("webhook timeouts must be positive")
        if keep_alive_seconds < 0:
            raise InvalidInput("keep_alive_seconds must not be negative (0 keeps no connection)")
        if max_idle_per_destination < 0 or max_idle < 0:
            raise InvalidInput("max_idle_per_destination and max_idle must not be negative")
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
        self._keep_alive_seconds = keep_alive_seconds
        self._kept = _KeptConnections(keep_alive_seconds, max_idle_per_destination, max_idle,
                                      monotonic)

    @property
    def idle_connections(self) -> int:
        """How many connections are kept, idle, for later sends."""
        return len(self._kept)

    def close(self) -> None:
        """Close every kept connection (sends after this open new ones, and keep them)."""
        self._kept.close()

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
        msg_id = signing.message_id(message.delivery_key)
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": msg_id,
            signing.HEADER_ID: msg_id,
            signing.HEADER_TIMESTAMP: str(timestamp),
            signing.HEADER_SIGNATURE: signing.sign_all(message.secrets, msg_id, timestamp, body),
        }
        written_before = False
        kept = self._kept.take(target.scheme, target.host, target.port, addresses)
        if kept is not None:
            first = self._try(kept[0], kept[1], target, headers, body, now, deadline,
                              reused=True)
            if first.result is not None:
                return first.result
            # The receiver closed the kept connection as the request went out: once more, on a
            # new connection.
            written_before = first.written
        connected = self._connect(target, addresses, deadline)
        if isinstance(connected, SendResult):
            result = connected
        else:
            fresh = self._try(connected[0], connected[1], target, headers, body, now, deadline,
                              reused=False).result
            assert fresh is not None  # only a try on a kept connection comes back without one
            result = fresh
        if written_before and result.outcome is Outcome.TRANSIENT and result.status_code is None:
            # Nothing was sent this time, but the request was written on the kept connection
            # before it closed: the receiver may have acted on it.
            return dataclasses.replace(result, outcome=Outcome.UNKNOWN, detail=_one_line(
                f"{result.detail}; the request was written on a kept connection before the "
                "receiver closed it, and may have been received", 400))
        return result

    def _try(
        self,
        sock: socket.socket,
        address: IPAddress,
        target: _Target,
        headers: dict[str, str],
        body: bytes,
        now: datetime,
        deadline: _Deadline,
        *,
        reused: bool,
    ) -> _Try:
        """One request on ``sock``, which it then keeps for a later send or closes."""
        conn = http.client.HTTPConnection(str(address), target.port, timeout=self.read_timeout)
        wrapped = _DeadlineSocket(sock, deadline, self.read_timeout)
        # Duck-typed: http.client only calls sendall, makefile("rb") and close on it.
        conn.sock = cast(socket.socket, wrapped)
        keep = False
        try:
            attempt = self._exchange(conn, wrapped, target, headers, body, now, reused=reused)
            reader = wrapped.reader
            keep = attempt.clean and reader is not None and reader.closed and not reader.leftover
        finally:
            conn.sock = None  # detached: closing the connection leaves the socket alone
            conn.close()
            destination = (target.scheme, target.host, target.port, address)
            if not (keep and self._kept.give_back(destination, sock, attempt.keep_for)):
                sock.close()
        return attempt

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:  # made on first use: loading the CA bundle takes time
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _connect(
        self, target: _Target, addresses: list[IPAddress], deadline: _Deadline
    ) -> tuple[socket.socket, IPAddress] | SendResult:
        """Open a connection to the first vetted address that answers; nothing is sent yet."""
        server_name = None
        if target.scheme == "https":
            try:
                # As ssl encodes it, but checked before a socket exists: ssl refuses a name
                # (a label over 63 characters, an empty one) only after taking the socket over.
                server_name = target.host.encode("idna").decode("ascii")
            except UnicodeError as exc:
                return SendResult(Outcome.PERMANENT, _one_line(
                    f"TLS: the host name {target.host} cannot be sent as the server name: "
                    f"{exc}"))
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
            if server_name is None:
                return sock, address
            try:
                return self._start_tls(sock, server_name, target.host, where, deadline), address
            except _NotStarted as failed:
                return failed.result
        return SendResult(Outcome.TRANSIENT, failure)

    def _start_tls(self, sock: socket.socket, server_name: str, host: str, where: str,
                   deadline: _Deadline) -> ssl.SSLSocket:
        """The TLS connection over ``sock``; whatever fails, ``sock`` is closed and
        :class:`_NotStarted` says why (nothing was sent)."""
        try:
            try:
                timeout, deadline_sets_it = deadline.timeout(self.connect_timeout)
            except _DeadlineHit:
                raise _NotStarted(self._late_connect(where)) from None
            sock.settimeout(timeout)  # one bound for the whole handshake
            try:
                return self._tls().wrap_socket(sock, server_hostname=server_name)
            except (OSError, ssl.SSLError) as exc:
                if isinstance(exc, TimeoutError) and deadline_sets_it:
                    raise _NotStarted(self._late_connect(where)) from None
                raise _NotStarted(SendResult(
                    Outcome.TRANSIENT, _one_line(f"TLS handshake with {where} failed: {exc}")
                )) from None
            except ValueError as exc:  # the context or the name refused before the handshake
                raise _NotStarted(SendResult(Outcome.PERMANENT, _one_line(
                    f"TLS with {host} at {where} cannot start: {exc}"))) from None
        except BaseException:
            sock.close()
            raise

    def _late_connect(self, where: str) -> SendResult:
        return SendResult(
            Outcome.TRANSIENT,
            f"send deadline of {self.send_timeout}s hit while connecting to {where}; "
            "nothing was sent",
        )

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        wrapped: _DeadlineSocket,
        target: _Target,
        headers: dict[str, str],
        body: bytes,
        now: datetime,
        *,
        reused: bool,
    ) -> _Try:
        try:
            conn.request("POST", target.path, body=body, headers=headers)
        except ValueError as exc:
            # http.client refuses a control character in the path or a header before writing.
            return _Try(SendResult(Outcome.PERMANENT, _one_line(f"invalid request: {exc}")))
        except _DeadlineHit:
            # Cut off before or while writing: the receiver cannot act on a request it did not
            # get in full.
            return _Try(SendResult(
                Outcome.TRANSIENT,
                f"send deadline of {self.send_timeout}s hit while writing the request; "
                "it was not completely sent",
            ))
        except OSError as exc:
            if reused:
                return _Try(None)  # a kept connection the receiver had closed: try a new one
            # The request was not completely written, so the receiver cannot have acted on it.
            return _Try(SendResult(
                Outcome.TRANSIENT, _one_line(f"connection failed while sending: {exc}")
            ))
        try:
            response = self._final_response(conn.getresponse(), wrapped)
        except _DeadlineHit:
            return _Try(SendResult(
                Outcome.UNKNOWN,
                f"send deadline of {self.send_timeout}s hit while waiting for the response; "
                "the request was sent",
            ), written=True)
        except TimeoutError:
            return _Try(SendResult(
                Outcome.UNKNOWN,
                f"no response within {self.read_timeout}s (read timeout); the request was sent",
            ), written=True)
        except (OSError, http.client.HTTPException) as exc:
            if reused and isinstance(exc, _DROPPED) and wrapped.received == 0:
                # Closed or reset before a byte of an answer: what a receiver closing an idle
                # connection as the request arrives looks like. Try a new connection.
                return _Try(None, written=True)
            kind = type(exc).__name__
            return _Try(SendResult(
                Outcome.UNKNOWN,
                _one_line(f"connection lost after the request was sent ({kind}: {exc})"),
            ), written=True)
        cut_off = failed = False
        try:
            # One byte more than the cap: a chunked answer exactly at the cap is read to its end
            # (its last, empty chunk), and a longer one is known to be longer.
            snippet = response.read(self._max_response_bytes + 1)
        except _DeadlineHit:
            snippet, cut_off = b"", True
        except (OSError, http.client.HTTPException):
            snippet, failed = b"", True
        result = self._classify(response, snippet, now)
        if cut_off:  # the status is the answer; only the body was lost
            result = dataclasses.replace(result, detail=(
                f"{result.detail}; response body cut off at the {self.send_timeout}s "
                "send deadline"))
        clean = (not (cut_off or failed) and len(snippet) <= self._max_response_bytes
                 and _reusable(response))
        said = receiver_keep_alive(response.msg.get_all("Keep-Alive") or ())
        keep_for = self._keep_alive_seconds if said is None else min(
            said, self._keep_alive_seconds)
        return _Try(result, written=True, clean=clean, keep_for=keep_for)

    @staticmethod
    def _final_response(response: http.client.HTTPResponse,
                        wrapped: _DeadlineSocket) -> http.client.HTTPResponse:
        """The answer after any informational ones, which http.client does not skip (only 100
        Continue); they come on the same connection, in the same reader."""
        for _ in range(MAX_INTERIM_ANSWERS):  # ends: a bounded number of interim answers
            if not 102 <= response.status < 200:
                break
            # Detached, so closing it (the connection does) leaves the shared reader open.
            cast(Any, response).fp = None
            response = http.client.HTTPResponse(cast(socket.socket, wrapped), method="POST")
            response.begin()
        return response

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
            if status == 429:  # the receiver's own rate limit: paced, not failed (pacing.py)
                extra["throttled"] = True
        elif 400 <= status < 500:
            outcome = Outcome.PERMANENT
        else:
            # A response arrived but its meaning is undefined: the receiver may have acted.
            outcome = Outcome.UNKNOWN
            detail = f"{detail}: unexpected status"
        return SendResult(outcome, detail, status_code=status, retry_after=retry_after, extra=extra)
