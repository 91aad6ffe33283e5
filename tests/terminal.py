"""Running the ``reminders`` command line as a person does at a terminal: stdout and stderr
each a pseudo-terminal (or a pipe), as a shell gives them, read until the command exits."""

from __future__ import annotations

import fcntl
import os
import pty
import selectors
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass


@dataclass
class Seen:
    code: int
    out: str
    err: str


def _terminal(columns: int) -> tuple[int, int]:
    """A pseudo-terminal (master, slave) ``columns`` wide, without the CR its line discipline
    adds before each newline."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave


def run(argv: list[str], env: dict[str, str], *, stdout_tty: bool, stderr_tty: bool,
        columns: int = 200, timeout: float = 120.0) -> Seen:
    """``python -m reminders.cli ARGV`` with stdout and stderr each a terminal or a pipe."""
    ends: dict[str, tuple[int, int]] = {}
    streams: dict[str, int] = {}
    for name, tty in (("out", stdout_tty), ("err", stderr_tty)):
        ends[name] = _terminal(columns) if tty else os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "reminders.cli", *argv], env=env,
                            stdin=subprocess.DEVNULL, stdout=ends["out"][1],
                            stderr=ends["err"][1], close_fds=True)
    for name, (reader, writer) in ends.items():
        os.close(writer)
        streams[name] = reader
    got = {name: b"" for name in ends}
    selector = selectors.DefaultSelector()
    for name, fd in streams.items():
        selector.register(fd, selectors.EVENT_READ, name)
    deadline = time.monotonic() + timeout
    try:
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1.0):
                try:
                    chunk = os.read(key.fd, 65536)
                except OSError:  # a terminal's master reads EIO once the command has exited
                    chunk = b""
                if chunk:
                    got[key.data] += chunk
                else:
                    selector.unregister(key.fd)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fd in streams.values():
            os.close(fd)
    return Seen(code, got["out"].decode(), got["err"].decode())


def completion_script(shell: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "completion", shell],
                          capture_output=True, text=True, timeout=60, check=True, env=env)
    assert done.stderr == ""
    return done.stdout


def bash_completes(*words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash offers for the last word of ``reminders WORDS...`` (``""`` for a new word),
    calling the function ``complete -p reminders`` names, as bash does on Tab."""
    line = "reminders " + " ".join(words)
    program = f"""
{completion_script("bash", env)}
spec=$(complete -p reminders) || exit 3
fn=$(sed -E 's/.*-F ([^ ]+).*/\\1/' <<<"$spec")
COMP_WORDS=(reminders {" ".join(f"'{w}'" for w in words)})
COMP_CWORD={len(words)}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
"$fn" reminders '{words[-1]}' '{words[-2] if len(words) > 1 else "reminders"}'
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    return sorted(set(done.stdout.split()))
