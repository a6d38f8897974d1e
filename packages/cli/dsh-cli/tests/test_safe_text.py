"""The terminal-safety helpers and what the approval prompt renders, as functions."""

from __future__ import annotations

import pytest

from dsh.cli._approve import MAX_LINES, render_request
from dsh.cli._safe_text import strip_controls, visible
from dsh.core import Context, PermissionRequest, parse_preset

pytestmark = pytest.mark.timeout(20)


@pytest.mark.parametrize(
    ("raw", "stripped"),
    [
        ("plain text, é 日本\n\tindented", "plain text, é 日本\n\tindented"),
        ("a\x1b]52;c;aGVsbG8=\x07b", "ab"),  # OSC 52 ended by BEL
        ("a\x1b]0;title\x1b\\b", "ab"),  # OSC ended by ST
        ("a\x9d52;c;Zm9v\x9cb", "ab"),  # 8-bit OSC and ST
        ("a\x1bP1$r0m\x1b\\b", "ab"),  # DCS
        ("x\x1b[2K\x1b[1;31mred\x1b[0m", "xred"),  # CSI
        ("x\x9b2Jy", "xy"),  # 8-bit CSI
        ("x\x1b7y\x1b(Bz", "xyz"),  # two-byte ESC sequences
        ("over\rwritten", "over\\rwritten"),
        ("windows\r\nline", "windows\nline"),
        ("bell\x07 del\x7f nel\x85 nul\x00", "bell\\x07 del\\x7f nel\\x85 nul\\x00"),
        ("cut \x1b]52;c;AAAA", "cut 52;c;AAAA"),  # unterminated: no ESC left
        ("lone \x1b", "lone \\x1b"),
    ],
)
def test_strip_controls(raw: str, stripped: str) -> None:
    assert strip_controls(raw) == stripped


def test_visible_shows_every_control() -> None:
    text = "touch X #\x1b[2K\rRun `ls -la`\n\tnext \x9b \u202eevil"
    assert visible(text) == "touch X #\\x1b[2K\\rRun `ls -la`\n\tnext \\x9b \\u202eevil"
    assert visible(text, one_line=True) == (
        "touch X #\\x1b[2K\\rRun `ls -la`\\n\\tnext \\x9b \\u202eevil"
    )


@pytest.mark.anyio
async def test_the_prompt_shows_every_argument_and_cuts_only_what_does_not_execute() -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        agent = ctx.agents.create(label="lead")
        body = "\n".join(f"line {n}" for n in range(100))
        write = PermissionRequest(
            "write_file",
            "edit",
            "Write notes\\x1b.txt",
            {"path": "notes\x1b]0;x\x07.txt", "content": body},
            agent,
            "call-1",
        )
        shown = render_request(write)
        assert "\x1b" not in shown
        assert "  path: notes\\x1b]0;x\\x07.txt" in shown
        assert f"    line {MAX_LINES - 1}\n" in shown
        assert f"line {MAX_LINES}\n" not in shown
        assert f"[… {100 - MAX_LINES} more lines not shown]" in shown
        command = "\n".join(f"echo {n}" for n in range(100))
        shell = PermissionRequest(
            "shell", "execute", "Run `echo 0` (+99 more lines)", {"command": command}, agent, "c2"
        )
        shown = render_request(shell)
        assert shown.startswith("lead wants to run shell: Run `echo 0` (+99 more lines)\n")
        assert "  command:\n    echo 0\n    echo 1\n" in shown
        assert "    echo 99\n" in shown  # never cut
        assert "not shown" not in shown
