"""Shell completion generated from the parser: bash's own completion machinery, run against the
script ``reminders completion bash`` prints, completes flags (also after an option's value) and
the values the command line knows (channels, states); zsh and fish get scripts too."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "completion", shell],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stderr == ""
    return done.stdout


def complete(*words: str) -> list[str]:
    """What bash offers for the last word of ``reminders WORDS...`` (``""`` for a new word),
    calling the function ``complete -p reminders`` names, as bash does on Tab."""
    line = "reminders " + " ".join(words)
    program = f"""
{_script("bash")}
spec=$(complete -p reminders) || exit 3
fn=$(sed -E 's/.*-F ([^ ]+).*/\\1/' <<<"$spec")
COMP_WORDS=(reminders {" ".join(f"'{w}'" for w in words)})
COMP_CWORD={len(words)}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
"$fn" reminders '{words[-1]}' '{words[-2] if len(words) > 1 else "reminders"}'
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return sorted(set(done.stdout.split()))


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_flags_complete_after_an_option_s_value() -> None:
    offered = complete("list", "--tenant", "acme", "--")
    assert "--state" in offered and "--channel" in offered and "--limit" in offered


def test_subcommands_and_a_flag_s_prefix_complete() -> None:
    assert {"add", "remove", "rotate-secret", "list"} <= set(complete("endpoints", ""))
    assert {"pause", "resume", "list"} <= set(complete("tenants", ""))
    assert complete("list", "--st") == ["--state"]


def test_a_channel_completes_from_its_choices() -> None:
    assert complete("schedule", "--channel", "") == ["email", "sms", "webhook"]


def test_a_state_completes_from_the_states() -> None:
    assert complete("list", "--state", "") == sorted(
        ["scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale",
         "unknown", "dead"])
    assert "dead" in complete("reconcile", "--state", "d")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_a_script_with_the_commands(shell: str) -> None:
    text = _script(shell)
    assert "rotate-secret" in text and "--max-seconds" in text
