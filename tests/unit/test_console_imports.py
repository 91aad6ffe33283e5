"""The console's libraries load only for `reminders console`: never in a Lambda handler, nor in
the command line's other commands."""

from __future__ import annotations

import subprocess
import sys

CONSOLE_ONLY = ("starlette", "jinja2", "uvicorn", "pygal", "multipart", "python_multipart",
                "reminders.console")


def loaded_after(code: str) -> list[str]:
    probe = (f"import sys; {code}; print('\\n'.join(m for m in sys.modules if m in "
             f"{CONSOLE_ONLY!r} or m.startswith('reminders.console.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.split()


def test_no_handler_imports_the_console() -> None:
    assert loaded_after("import functions.scanner.handler, functions.consumer.handler, "
                        "functions.redrive.handler, functions.migrate.handler, "
                        "functions.publisher.handler") == []


def test_the_command_line_imports_it_only_for_the_console_command() -> None:
    assert loaded_after("import reminders.cli as c; c.build_parser()") == []
    assert "starlette" in loaded_after("import reminders.console.app")
