"""The documentation site's generated pages: a MkDocs hook (``hooks:`` in ``mkdocs.yml``).

``make docs`` (``mkdocs build --strict``, offline) builds ``docs/`` into ``build/site``. Two
pages are not files under ``docs/``; this hook makes them on every build, so neither can drift:

- ``index.md``, the site's home: ``README.md`` itself, its links into ``docs/`` made relative
  to the site (``docs/deploying.md`` -> ``deploying.md``);
- ``cli-reference.md``: every command, subcommand and flag of ``reminders``, read from the
  command line's own parser (``reminders.cli.build_parser``), with each flag's help, choices and
  default as ``--help`` prints them.

``tests/unit/test_docs_site.py`` builds the site with ``--strict`` (a broken link or anchor
fails) and checks the reference against the parser.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"
REFERENCE_PAGE = "cli-reference.md"
HOME_PAGE = "index.md"

# A Markdown link or image whose target is a path under docs/: ](docs/x.md#y) -> ](x.md#y).
_DOCS_LINK = re.compile(r"\]\(docs/")


def home_page(readme: str) -> str:
    """README.md as the site's home page: the same text, its ``docs/`` links site-relative."""
    return _DOCS_LINK.sub("](", readme)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[
        tuple[str, str | None, list[str], argparse.ArgumentParser]]:
    """(name, one-line help, aliases, parser) of each subcommand of ``parser``, in the order
    ``--help`` lists them; an alias is named once, with the command it stands for."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        seen: dict[int, tuple[str, list[str]]] = {}
        for name, sub in action.choices.items():
            if id(sub) in seen:
                seen[id(sub)][1].append(name)
            else:
                seen[id(sub)] = (name, [])
        for name, sub in action.choices.items():
            first, aliases = seen[id(sub)]
            if first == name:
                yield name, helps.get(name), aliases, sub


def _flag_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument's help as ``--help`` prints it (``%(default)s`` and the like expanded)."""
    formatter = parser._get_formatter()
    return " ".join(formatter._expand_help(action).split()) if action.help else ""


def _flag_name(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument as usage writes it: ``NAME``, ``--flag``, ``-o {json,text}, --output ...``."""
    formatter = parser._get_formatter()
    if not action.option_strings:  # a positional argument
        return formatter._format_args(action, formatter._get_default_metavar_for_positional(
            action))
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    value = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return ", ".join(f"{option} {value}" for option in action.option_strings)


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        text = _flag_help(parser, action)
        extra: list[str] = []
        if action.choices is not None and action.metavar is not None \
                and not isinstance(action.choices, dict):
            extra.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if action.required and action.option_strings:
            extra.append("required")
        if extra:
            text = f"{text} ({'; '.join(extra)})" if text else "; ".join(extra)
        lines.append(f"- `{_flag_name(parser, action)}`" + (f": {_escape(text)}" if text else ""))
    return lines


def _escape(text: str) -> str:
    """Help text as Markdown prose: what Markdown would read as markup, outside code, is
    escaped (``<``, ``*``, ``_`` at word edges); backticked code stays code."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = (parts[i].replace("\\", "\\\\").replace("<", "&lt;").replace("*", "\\*")
                    .replace("_", "\\_").replace("[", "\\["))
    return "".join(parts)


def _usage(parser: argparse.ArgumentParser) -> str:
    usage = " ".join(parser.format_usage().split())
    return usage.removeprefix("usage: ")


def _sections(parser: argparse.ArgumentParser, path: list[str], level: int,
              summary: str | None, aliases: list[str]) -> Iterator[str]:
    title = " ".join(path)
    yield f"{'#' * level} `{title}`"
    yield ""
    if summary:
        yield _escape(" ".join(summary.split()))
        yield ""
    if aliases:
        yield "Also: " + ", ".join(f"`{' '.join([*path[:-1], a])}`" for a in aliases)
        yield ""
    yield "```"
    yield _usage(parser)
    yield "```"
    yield ""
    description = parser.description
    if description and description != summary:
        yield _escape(" ".join(description.split()))
        yield ""
    arguments = _arguments(parser)
    if arguments:
        yield from arguments
        yield ""
    if parser.epilog and level > 1:
        yield _escape(" ".join(parser.epilog.split()))
        yield ""
    for name, help_, sub_aliases, sub in _subcommands(parser):
        yield from _sections(sub, [*path, name], min(level + 1, 4), help_, sub_aliases)


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The command line's reference page, from its parser (``reminders.cli.build_parser``)."""
    if parser is None:
        from reminders.cli import build_parser

        parser = build_parser()
    head = [
        "# Command reference",
        "",
        "Generated from the command line's own parser when the site is built "
        "(`infra/docs.py`), so it lists exactly what `reminders` accepts: every command, "
        "subcommand and flag, with the help `--help` prints. For what the commands are for, "
        "see [The command line](cli.md).",
        "",
        "```",
        _usage(parser),
        "```",
        "",
    ]
    if parser.epilog:
        head += [_escape(" ".join(parser.epilog.split())), ""]
    head += ["Global flags:", "", *_arguments(parser), ""]
    body: list[str] = []
    for name, help_, aliases, sub in _subcommands(parser):
        body.extend(_sections(sub, ["reminders", name], 2, help_, aliases))
    return "\n".join(head + body).rstrip() + "\n"


# MkDocs hook --------------------------------------------------------------------------------

def on_files(files: Any, config: Any) -> Any:
    """Add the two generated pages to the site's files (before the navigation is built)."""
    from mkdocs.structure.files import File

    readme = Path(config["config_file_path"]).resolve().parent / "README.md"
    for uri, content in ((HOME_PAGE, home_page(readme.read_text(encoding="utf-8"))),
                         (REFERENCE_PAGE, cli_reference())):
        if files.get_file_from_path(uri) is not None:
            raise ValueError(f"docs/{uri} is generated by infra/docs.py: remove the file")
        files.append(File.generated(config, uri, content=content))
    return files
