"""Text made safe for a terminal: what a model, a tool or a child wrote must not drive
the terminal it is shown on (move the cursor, erase a line, set the clipboard with
OSC 52, retitle the window).

Two treatments:

* :func:`visible` — every control character is *shown*: ``\\x1b``, ``\\r``, ``\\x9b``,
  ``\\u202e`` (C0 except newline and tab, DEL, C1, and the Unicode bidirectional
  overrides that reorder what is displayed). For what a person must judge exactly:
  the approval prompt. ``one_line=True`` also shows newlines and tabs.
* :func:`strip_controls` — complete escape sequences (CSI, OSC, DCS, SOS, PM, APC,
  and the two-byte ``ESC x`` ones, in their 7- and 8-bit forms, OSC ended by BEL or
  ST) are *removed*; any other control character is shown as above; ``\\r\\n``
  becomes ``\\n``. For streamed model text, tool titles, labels and diagnostics.

Neither treatment keeps text that can reach the terminal as a control.
"""

from __future__ import annotations

import re

__all__ = ["strip_controls", "visible"]

# A string-type sequence's body: printable characters only; ended by BEL or ST.
_BODY = r"[^\x00-\x1f\x7f-\x9f]*"
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: ESC [ (or 0x9b) params, intermediates, final
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])" + _BODY + r"(?:\x07|\x1b\\|\x9c)"  # OSC, DCS...
    r"|\x1b[ -/]*[0-~]"  # ESC 7, ESC ( B, ESC c, ...
)
# Bidirectional formatting characters: they reorder the text a terminal displays.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_AND_BIDI = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_ALL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_NAMES = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _show(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMES.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``,
    ``\\u202e``); newlines and tabs kept unless ``one_line``."""
    pattern = _ALL if one_line else _CONTROLS_AND_BIDI
    return pattern.sub(_show, text)


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences, other control characters shown
    (``\\x1b``, ``\\r``); newlines and tabs kept."""
    if text.isprintable():  # the common case: nothing to do
        return text
    text = _SEQUENCE.sub("", text.replace("\r\n", "\n"))
    return _CONTROLS.sub(_show, text)
