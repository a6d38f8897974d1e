"""The tape's format: lines, redaction, canonical requests, conversation keys, diffs.

Everything here is pure (no I/O but :func:`read_tape`); the proxy (``_proxy``) uses it
to write lines in record mode and to match requests in replay mode.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import json.encoder
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from dsh.core import DshError

__all__ = [
    "FORMAT_VERSION",
    "READ_VERSIONS",
    "TAPE_FILE",
    "VOLATILE_FIELDS",
    "Divergence",
    "Tape",
    "TapeError",
    "call_number",
    "canonical",
    "conversation_key",
    "cut_lines",
    "match_key",
    "needs_redaction",
    "parse_body",
    "pretty",
    "read_tape",
    "redact_path",
    "redact_text",
    "redact_value",
    "similarity",
    "to_json",
    "unified_diff",
]

FORMAT_VERSION = 2
"""The version of the tape format this package writes (``"tape"`` in the header,
``"v"`` on every line). Version 2 added tool lines (``"kind": "tool"``); a version 1
tape (model exchanges only) is read all the same (:data:`READ_VERSIONS`)."""

READ_VERSIONS = (1, 2)
"""The tape format versions :func:`read_tape` reads."""

TAPE_FILE = "tape.jsonl"
"""The tape's file name inside the tape directory."""

VOLATILE_FIELDS: tuple[tuple[str, ...], ...] = (
    ("user",),
    ("prompt_cache_key",),
    ("safety_identifier",),
    ("client_metadata",),
    ("metadata", "user_id"),
    ("metadata", "session_id"),
    ("input", "*", "id"),
)
"""Request fields left out of the comparison in replay mode (paths into the JSON body;
``*`` is every item of a list): what a client makes up per run, not what the model is
asked. Found by recording the same task twice: Codex sends a fresh
``prompt_cache_key``, ``client_metadata`` (session, thread and turn ids) and ``id`` on
every ``input`` item it writes (the ids of items a model returned are the recorded
ones, but the comparison leaves them out too); Claude Code a per-session
``metadata.user_id``; dsh's own agents nothing. They are still recorded."""

REDACTED = "[REDACTED]"
"""What a credential is replaced with in a tape."""

_KEY_NAMES = {
    "apikey",
    "api_key",
    "x_api_key",
    "authorization",
    "proxy_authorization",
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "secret",
    "password",
}
# Query parameters whose value is a credential (``?key=`` is Google's API key).
_QUERY_KEY_NAMES = _KEY_NAMES | {"key", "token", "sig", "signature", "code"}
# Things that look like credentials wherever they appear in a text.
_KEY_PATTERNS = re.compile(
    r"(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic (sk-ant-...), DeepSeek keys
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"  # an Authorization value quoted in a text
    r"|AIza[A-Za-z0-9_\-]{30,}"  # Google API keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
)
_DIFF_LINES = 40
_DIFF_LINE_WIDTH = 160


class TapeError(DshError):
    """A tape cannot be used: missing, unreadable, of an unknown version, or a proxy
    that cannot start."""


def _key_name(name: str, names: frozenset[str] | set[str] = _KEY_NAMES) -> bool:
    return name.lower().replace("-", "_") in names


# Member names seen, and whether each is key-like (names repeat from call to call).
_MEMBER_NAMES: dict[str, bool] = {}
_MEMBER_NAMES_KEPT = 4096


def _key_member(name: str) -> bool:
    found = _MEMBER_NAMES.get(name)
    if found is None:
        found = _key_name(name)
        if len(_MEMBER_NAMES) < _MEMBER_NAMES_KEPT:
            _MEMBER_NAMES[name] = found
    return found


_GITHUB_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")


def _may_hold_key(text: str) -> bool:
    """False when :data:`_KEY_PATTERNS` cannot match ``text`` (each pattern needs one of
    these pieces): most texts are then passed over without running the pattern at
    every position of a long prompt."""
    return (
        "k-" in text  # sk-, pk-, rk-
        or "AIza" in text
        or ("earer" in text.lower())  # bearer, in any case
        or ("gh" in text and any(prefix in text for prefix in _GITHUB_PREFIXES))
    )


# Every name of _KEY_NAMES holds one of these pieces, or is one of the token names.
_KEY_NAME_PIECES = ("key", "auth", "secret", "password")
_TOKEN_NAMES = ("access_token", "refresh_token", "id_token")


def needs_redaction(text: str) -> bool:
    """False when the JSON text of a value shows that :func:`redact_value` would leave
    the value as it is: no key-looking text anywhere and no key-like member name (the
    pieces every match needs are never escaped in JSON). True means: maybe."""
    lowered = text.lower()
    if (
        "k-" in text
        or "AIza" in text
        or "earer" in lowered
        or ("gh" in text and any(prefix in text for prefix in _GITHUB_PREFIXES))
    ):
        return True
    if any(piece in lowered for piece in _KEY_NAME_PIECES):
        return True
    if "token" in lowered:
        names = lowered.replace("-", "_")
        return any(name in names for name in _TOKEN_NAMES)
    return False


def redact_text(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by ``[REDACTED]``."""
    return _KEY_PATTERNS.sub(REDACTED, text) if _may_hold_key(text) else text


def redact_value(value: Any) -> Any:
    """A copy of a JSON value with credentials redacted: the value of every key-like
    member (``api_key``, ``authorization``, ``token``, ...) and every key-looking text."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, str):
                out[k] = REDACTED if v and _key_member(k) else redact_text(v)
            else:
                out[k] = redact_value(v)
        return out
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    return value


def redact_path(path: str) -> str:
    """A request path with the values of key-like query parameters (``?key=``,
    ``?api-key=``, ...) redacted."""
    parts = urlsplit(path)
    if not parts.query:
        return redact_text(path)
    query = [
        (k, REDACTED if _key_name(k, _QUERY_KEY_NAMES) else v)
        for k, v in parse_qsl(parts.query, True)
    ]
    return redact_text(f"{parts.path}?{urlencode(query, safe='[]')}")


def parse_body(body: bytes) -> Any:
    """The body as recorded: its JSON value, else its text (None when empty); redacted."""
    if not body:
        return None
    text = body.decode("utf-8", "replace")
    try:
        return redact_value(json.loads(text))
    except ValueError:
        return redact_text(text)


def canonical(request: Any) -> Any:
    """The request as replay compares it: :data:`VOLATILE_FIELDS` removed (keys are
    sorted when it is serialized, see :func:`pretty`). ``request`` is not changed; the
    result shares what it does not change with it (read it, do not change it)."""
    if not isinstance(request, dict):
        return request
    out: Any = request
    for path in VOLATILE_FIELDS:
        out = _dropped(out, path)
    return out


def _dropped(node: Any, path: Sequence[str]) -> Any:
    """``node`` without ``path``: a changed copy of each container on the way to a
    member that is dropped, the same object where nothing is."""
    name, rest = path[0], path[1:]
    if name == "*":
        if isinstance(node, list) and rest:
            items = [_dropped(item, rest) for item in node]
            if any(new is not old for new, old in zip(items, node, strict=True)):
                return items
        return node
    if not isinstance(node, dict) or name not in node:
        return node
    if not rest:
        return {k: v for k, v in node.items() if k != name}
    child = _dropped(node[name], rest)
    if child is node[name]:
        return node
    return {**node, name: child}


def _line_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False)``, made once: CPython's C encoder called
    straight (no check for circular values: one is a ``RecursionError``), else the
    standard encoder."""
    standard = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return standard.encode
    encode = make(
        None, standard.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True
    )

    def to_json(value: Any) -> str:
        return "".join(encode(value, 0))

    return to_json


to_json = _line_encoder()
"""``json.dumps(value, ensure_ascii=False)`` (one encoder, not one per line)."""


def match_key(value: Any) -> str:
    """What replay matches a request (or a tool call's arguments) by: its
    :func:`canonical` form as compact JSON with sorted keys (the C encoder's, unlike
    :func:`pretty`'s indented form, which is for diffs)."""
    return json.dumps(canonical(value), sort_keys=True, ensure_ascii=False)


def pretty(value: Any) -> str:
    """Canonical JSON text: keys sorted, one member per line (what diffs are made of)."""
    return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)


def _messages(request: Mapping[str, Any]) -> list[Any]:
    for name in ("messages", "input", "contents"):
        items = request.get(name)
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        if isinstance(items, list):
            return items
    return []


def _system(request: Mapping[str, Any], items: Sequence[Any]) -> Any:
    for name in ("system", "instructions", "system_instruction"):
        if request.get(name):
            return request[name]
    for item in items:
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            return item.get("content")
    return None


def conversation_key(request: Any) -> str:
    """A short hash of the request's system text (``system`` / ``instructions`` / the
    first system or developer message) and its first user message: the same for every
    call of one agent's conversation, different between agents with different tasks."""
    if not isinstance(request, dict):
        return ""
    items = _messages(request)
    first_user = next(
        (i.get("content") for i in items if isinstance(i, dict) and i.get("role") == "user"),
        None,
    )
    text = json.dumps([_system(request, items), first_user], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _from_assistant(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type")
    if item.get("role") in ("assistant", "model"):
        return True
    return isinstance(kind, str) and (kind.endswith("_call") or kind == "reasoning")


def call_number(request: Any) -> int:
    """How many assistant turns the request already holds (0 for an agent's first call):
    runs of consecutive assistant items (messages, function calls, reasoning)."""
    if not isinstance(request, dict):
        return 0
    turns, previous = 0, False
    for item in _messages(request):
        current = _from_assistant(item)
        if current and not previous:
            turns += 1
        previous = current
    return turns


def unified_diff(recorded: Any, request: Any) -> str:
    """A unified diff (at most 40 lines) from a recorded request to this one, over
    :func:`pretty` canonical JSON, long lines cut (a changed long line around its
    first difference, :func:`cut_lines`)."""

    def lines(value: Any) -> list[str]:
        return pretty(canonical(value)).splitlines()

    diff = cut_lines(
        list(
            difflib.unified_diff(
                lines(recorded), lines(request), "tape", "request", n=2, lineterm=""
            )
        )
    )
    if len(diff) > _DIFF_LINES:
        more = len(diff) - (_DIFF_LINES - 1)
        diff = [*diff[: _DIFF_LINES - 1], f"... ({more} more diff lines)"]
    return "\n".join(diff)


def cut_lines(diff: list[str], width: int = _DIFF_LINE_WIDTH) -> list[str]:
    """The lines of a unified diff cut to ``width``: a removed line and the added line
    right after it (one long JSON text changed somewhere inside) both show the same
    window around their first difference, so a change deep in a system prompt is
    seen; other long lines keep their start."""
    out = list(diff)
    for i in range(len(out) - 1):
        old, new = out[i], out[i + 1]
        if not (old.startswith("-") and new.startswith("+")) or old.startswith("---"):
            continue
        if max(len(old), len(new)) <= width:
            continue
        same = next(
            (n for n, (a, b) in enumerate(zip(old[1:], new[1:], strict=False)) if a != b),
            min(len(old), len(new)) - 1,
        )
        start = max(0, same - width // 3)
        for j, line in ((i, old), (i + 1, new)):
            body = line[1 + start : 1 + start + width - 7]
            more = "..." if 1 + start + width - 7 < len(line) else ""
            out[j] = line[0] + ("..." if start else "") + body + more
    return [line if len(line) <= width else line[: width - 3] + "..." for line in out]


@dataclass(frozen=True)
class Divergence:
    """The first request in replay mode that the tape does not hold.

    ``label``, ``path``, ``conversation`` and ``call`` say where it came from (the
    conversation key and call number stand in for the agent's place in the tree);
    ``diff`` is a short unified diff from the closest recorded request not yet
    answered (empty text when the tape holds none for this label and path).
    """

    label: str
    path: str
    conversation: str
    call: int
    diff: str
    closest_seq: int | None = None

    def describe(self) -> str:
        """A few lines for a terminal: where, then the diff."""
        where = (
            f"tape divergence: {self.label} {self.path}: conversation {self.conversation},"
            f" call {self.call} is not on the tape"
        )
        if self.closest_seq is None:
            return f"{where} (no recorded request left for this endpoint)"
        return f"{where}; closest recorded request (seq {self.closest_seq}):\n{self.diff}"

    def __str__(self) -> str:
        return self.describe()


@dataclass
class Tape:
    """A tape as read from its file: the first header (``{"tape": 2, ...}``), the
    model exchanges and the tool calls (``"kind": "tool"``), each in file order."""

    header: dict[str, Any]
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)


def read_tape(directory: str | Path) -> Tape:
    """Read ``<directory>/tape.jsonl``; :class:`TapeError` if it is missing, not a tape,
    or of a version this package does not know. A torn last line (a recorder killed
    mid-write) is skipped."""
    path = Path(directory) / TAPE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TapeError(f"cannot read the tape {path}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    header: dict[str, Any] | None = None
    exchanges: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            if number == len(lines):
                break
            raise TapeError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(entry, dict):
            raise TapeError(f"{path}:{number}: not a JSON object")
        if "tape" in entry:
            if entry["tape"] not in READ_VERSIONS:
                raise TapeError(f"{path}: tape format {entry['tape']!r} is not supported")
            header = header or entry
        elif entry.get("v") in READ_VERSIONS:
            (tools if entry.get("kind") == "tool" else exchanges).append(entry)
        else:
            raise TapeError(f"{path}:{number}: exchange of unknown version {entry.get('v')!r}")
    if header is None:
        raise TapeError(f"{path} is not a tape (no header line)")
    return Tape(header, exchanges, tools)


def similarity(a: str, b: str) -> float:
    """How alike two canonical texts are (0..1), for picking the closest request."""
    return difflib.SequenceMatcher(None, a.splitlines(), b.splitlines()).ratio()
