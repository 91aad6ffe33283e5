"""The documentation site: it builds with ``mkdocs build --strict`` (a broken link or anchor, a
page left out of the navigation, fails), offline (no web font, stylesheet or script from
elsewhere), its home page is README.md, and its command reference is the parser's; README.md
stays the landing page with the two commands first; and the suite's figures are dated."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import docs
from reminders.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _mkdocs_missing() -> str | None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError as exc:
        return f"the `docs` extra is not installed ({exc.name}): make docs installs it"
    return None


def built_site(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp)],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = _mkdocs_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    out = tmp_path_factory.mktemp("site")
    done = built_site(out)
    assert done.returncode == 0, done.stderr + done.stdout
    return out


def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "cli-reference.html").is_file()
    for page in DOCS.glob("*.md"):
        assert (site / page.with_suffix(".html").name).is_file(), page


# What a page would fetch from elsewhere: a stylesheet, script, font, image or preconnect.
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//[^"']+["'][^>]*>""", re.I)
FETCHING_TAGS = re.compile(r"<(script|link|img|iframe|source)\b[^>]*>", re.I)


def test_the_site_fetches_nothing_from_elsewhere(site: Path) -> None:
    """Built offline and readable offline: no page loads a font, stylesheet or script from
    another host (links to other sites are fine: they are read, not fetched)."""
    fetched: list[str] = []
    for page in site.rglob("*.html"):
        for tag in FETCHING_TAGS.finditer(page.read_text(encoding="utf-8")):
            text = tag.group(0)
            if tag.group(1).lower() == "link" and not re.search(
                    r"rel=[\"']?(stylesheet|preconnect|preload|icon|modulepreload)", text):
                continue
            if EXTERNAL.search(text):
                fetched.append(f"{page.relative_to(site)}: {text}")
    for sheet in site.rglob("*.css"):
        fetched += [f"{sheet.relative_to(site)}: {m}" for m in re.findall(
            r"@import\s+url\(\s*[\"']?https?://[^)]*\)|url\(\s*[\"']?https?://[^)]*\)",
            sheet.read_text(encoding="utf-8"))]
    assert fetched == []


def _text(path: Path) -> str:
    """A page's text, tags stripped and entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_the_home_page_is_the_readme(site: Path) -> None:
    text = " ".join(_text(site / "index.html").split())
    (paragraph,) = [p for p in README.read_text(encoding="utf-8").split("\n\n")
                    if p.startswith("reminders delivers the messages")]
    assert " ".join(re.sub(r"[`*]", "", paragraph).split()) in text


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("reminders",)) -> list[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for name, _, _, sub in docs._subcommands(parser):
        found += _commands(sub, (*path, name))
    return found


def test_the_reference_in_the_site_has_every_command_and_flag(site: Path) -> None:
    """The built page, section by section: each command's heading, its usage line as
    ``--help`` prints it, and every flag it takes."""
    page = _text(site / "cli-reference.html")
    commands = _commands(build_parser())
    assert len(commands) > 40
    starts = sorted(page.index(f"{' '.join(path)}¶") for path, _ in commands[1:])
    for path, parser in commands:
        title = " ".join(path)
        if len(path) > 1:
            assert f"{title}¶" in page, title
            start = page.index(f"{title}¶")
            end = next((s for s in starts if s > start), len(page))
        else:
            start, end = 0, starts[0]
        section = page[start:end]
        assert " ".join(parser.format_usage().split()).removeprefix("usage: ") in " ".join(
            section.split()), title
        for action in parser._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                for option in action.option_strings:
                    assert option in section, (title, option)
                if action.help and not action.option_strings \
                        and not isinstance(action, argparse._SubParsersAction):
                    assert " ".join(action.help.split()) in " ".join(section.split()), (
                        title, action.dest)


def test_the_reference_follows_the_parser() -> None:
    """A command or flag added to the parser is in the next build's reference, with its help;
    one removed is gone (the page is made from whatever parser it is given)."""
    parser = argparse.ArgumentParser(prog="reminders", epilog="exit status: 0 success")
    parser.add_argument("--stack", metavar="NAME", help="the stack's name")
    sub = parser.add_subparsers(dest="command")
    hello = sub.add_parser("hello", help="say hello", aliases=["hi"],
                           description="Say hello to someone.")
    hello.add_argument("who", help="whom to greet")
    hello.add_argument("--times", type=int, default=1, help="how often (default: %(default)s)")
    hello.add_argument("--tone", choices=["warm", "dry"], help="the tone")
    deep = hello.add_subparsers(dest="how").add_parser("loudly", help="in capitals")
    deep.add_argument("--shout", action="store_true", help="with *stars* and <angle>")
    page = docs.cli_reference(parser)
    assert "## `reminders hello`\n\nsay hello\n\nAlso: `reminders hi`\n" in page
    assert "- `who`: whom to greet" in page
    assert "- `--times TIMES`: how often (default: 1)" in page
    assert "- `--tone {warm,dry}`: the tone" in page
    assert "### `reminders hello loudly`" in page
    assert r"- `--shout`: with \*stars\* and &lt;angle>" in page
    assert "- `--stack NAME`: the stack's name" in page
    assert "exit status: 0 success" in page
    assert page.count("## `reminders hi`") == 0  # an alias is not a command of its own


def test_the_home_page_links_into_the_site() -> None:
    text = "see [Deploying](docs/deploying.md#what-you-need) and ![x](docs/x.png) or docs/y.md"
    assert docs.home_page(text) == (
        "see [Deploying](deploying.md#what-you-need) and ![x](x.png) or docs/y.md")


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)\n```", text, re.S)


def test_the_readme_starts_with_the_two_commands() -> None:
    """The landing page: the two commands first, each doing its own set-up."""
    text = README.read_text(encoding="utf-8")
    first = _code_blocks(text)[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == [
        "make demo", "make test"]


def test_the_readme_is_a_landing_page() -> None:
    """The rest lives in docs/: the README stays readable in one sitting, and every page
    of the site is linked from it or from the navigation."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "put it in a page under docs/ and link it"


# A figure the suite or a benchmark run produces: "2,127 tests", "took 27 min 12 s".
SUITE_FIGURE = re.compile(r"\b\d[\d,]* tests\b|\b\d+ min \d+ s\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_the_suite_s_figures_are_dated() -> None:
    """A test count or a suite's time goes stale as tests are added: each paragraph that
    states one says when it was measured."""
    undated: list[str] = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for paragraph in page.read_text(encoding="utf-8").split("\n\n"):
            figure = SUITE_FIGURE.search(paragraph)
            if figure is not None and not DATE.search(paragraph):
                undated.append(f"{page.name}: {figure[0]}")
    assert undated == []
