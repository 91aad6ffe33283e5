"""The console's libraries load only for `reminders console`: never in a Lambda handler, nor in
the command line's other commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_without_the_console_packages_the_command_says_how_to_install_them(
        tmp_path: Path) -> None:
    """Each of the console's libraries missing in turn (its import blocked): `reminders
    console` exits 2 naming the missing module and the one install command; no traceback."""
    import os

    for missing in ("starlette", "jinja2", "uvicorn", "pygal", "python_multipart"):
        blocked = tmp_path / missing
        blocked.mkdir(exist_ok=True)
        (blocked / "sitecustomize.py").write_text(
            "import importlib.abc, sys\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name == {missing!r} or name.startswith({missing!r} + '.'):\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Block())\n")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(blocked), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]),
               "DATABASE_URL": "host=127.0.0.1 port=1 dbname=nothing user=nobody"}
        done = subprocess.run([sys.executable, "-m", "reminders.cli", "console", "--port",
                               "1"], capture_output=True, text=True, timeout=60, env=env)
        assert (done.returncode, done.stdout) == (2, ""), (missing, done.stderr)
        assert done.stderr == (
            f"reminders: error: console: its web libraries are not installed (no module "
            f"named '{missing}'): `make console`, or `pip install 'reminders[console]'` in "
            "this environment\n"), missing
