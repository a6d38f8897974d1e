"""Workspace trust: a ``dsh.toml`` found in the working directory is used only once
its user trusts it.

A cloned repository's ``dsh.toml`` would otherwise run what it says as soon as a
command loads it: an MCP server's command starts while the preset loads, a
``passthrough_env`` hands a child any secret, a ``base_url`` with an
``api_key_env`` sends a variable as a Bearer token to any host. So
:func:`dsh.core.find_preset` uses a discovered ``dsh.toml`` only when it is trusted
(or the caller says ``trust=True``, ``--trust``): else it raises
:class:`UntrustedPresetError`, whose message lists what the preset would run or
reach (:func:`preset_reach`) and how to trust it. A file named with ``--preset`` and
the installed named presets are trusted as they are.

Trust is recorded per file content: ``trusted.json`` in the user's state directory
(``$DSH_STATE_DIR``, else ``$XDG_STATE_HOME/dsh``, else ``~/.local/state/dsh``) maps
the resolved path of the preset to the SHA-256 of its bytes and of every local file it
``extends`` by path, so an edit to any of them asks again. The store is written
atomically (a temporary file renamed over it) with mode 0600, under a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dsh.core._presets import (
    MAX_EXTENDS_DEPTH,
    Preset,
    PresetError,
    load_named_preset,
    load_preset,
    merged_raw,
    named_preset_text,
    named_presets,
    toml_table,
)
from dsh.core._suggest import did_you_mean

__all__ = [
    "TrustedPreset",
    "UntrustedPresetError",
    "check_trust",
    "find_preset",
    "preset_reach",
    "revoke_trust",
    "trust_preset",
    "trust_store_path",
    "trusted_presets",
]

STATE_DIR_ENV = "DSH_STATE_DIR"
"""Overrides the folder of the trust store (tests, sandboxes)."""
STORE_NAME = "trusted.json"
_SHOWN_CHARACTERS = 300


class UntrustedPresetError(PresetError):
    """A preset found in the working directory is not trusted (or changed since it
    was): the message lists what it would run or reach and how to trust it."""

    def __init__(self, path: Path, digest: str, reach: list[str], *, changed: bool) -> None:
        self.path = path
        """The preset file (resolved)."""
        self.digest = digest
        """The content hash that was summarised: record it to trust what was shown."""
        self.reach = reach
        """What the preset would run or reach, one line each (:func:`preset_reach`)."""
        self.changed = changed
        """The file (or a file it extends) was trusted before, with other content."""
        state = "has changed since it was trusted" if changed else "is not trusted"
        lines = "\n".join(f"  {line}" for line in reach)
        super().__init__(
            f"{path} {state}: a dsh.toml found in the working directory is used only once"
            f" you trust it. It would:\n{lines}\nTo trust it: dsh trust"
            f" {shlex.quote(str(path))} (recorded until the file changes), or pass --trust"
            " for this run only."
        )


@dataclass(frozen=True, slots=True)
class TrustedPreset:
    """One entry of the trust store."""

    path: Path
    digest: str
    trusted_at: float
    """Seconds since the epoch."""

    @property
    def current(self) -> bool:
        """The file is there and its content (with what it extends) still matches."""
        try:
            return preset_digest(self.path) == self.digest
        except PresetError:
            return False


def trust_store_path() -> Path:
    """Where trust is recorded: ``$DSH_STATE_DIR/trusted.json``, else
    ``$XDG_STATE_HOME/dsh/trusted.json``, else ``~/.local/state/dsh/trusted.json``."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser() / STORE_NAME
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "dsh" / STORE_NAME


# -- content --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layers:
    """A preset file and the local files it extends (top first), as read once."""

    texts: list[tuple[Path, str]]
    named_base: str | None
    digest: str


def _layers(path: Path) -> _Layers:
    hasher = hashlib.sha256(b"dsh-trust-v1\n")
    texts: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    current, named = path, None
    while len(texts) < MAX_EXTENDS_DEPTH:
        resolved = current.resolve()
        if resolved in seen:
            break  # a cycle: loading the preset says so
        seen.add(resolved)
        try:
            data = resolved.read_bytes()
        except OSError as exc:
            raise PresetError(f"cannot read preset {current}: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PresetError(f"{current}: not UTF-8 text: {exc}") from None
        hasher.update(f"{resolved}\n".encode() + hashlib.sha256(data).digest())
        texts.append((resolved, text))
        extends = toml_table(text, str(current)).get("extends")
        if not isinstance(extends, str) or not extends.strip():
            break
        if extends.endswith(".toml") or "/" in extends or "\\" in extends:
            file = Path(extends).expanduser()
            current = file if file.is_absolute() else resolved.parent / file
        else:
            named = extends
            hasher.update(f"named:{extends}\n".encode())
            break
    return _Layers(texts, named, hasher.hexdigest())


def preset_digest(path: str | Path) -> str:
    """SHA-256 (hex) of the preset file and of every local file it ``extends`` by path:
    what trust is recorded against."""
    return _layers(Path(path)).digest


def preset_reach(path: str | Path) -> list[str]:
    """What the preset file would run or reach, one line each: commands of its rows
    (MCP servers, agent processes), hosts (model ``base_url``, ``url``) and the
    variables sent to them, variables passed through or set, permissions loosened to
    ``allow``, the sandbox widened. Rows and settings that come unchanged from an
    installed named preset it extends are left out. :class:`PresetError` if the
    preset is invalid."""
    file = Path(path)
    return _reach(file, _layers(file))


def _reach(path: Path, layers: _Layers) -> list[str]:
    text = layers.texts[0][1]
    merged = merged_raw(text, str(path), path.resolve().parent)
    base: dict[str, Any] = {}
    if layers.named_base is not None:
        base_text, source, base_dir = named_preset_text(layers.named_base)
        base = merged_raw(base_text, source, base_dir)
    out: list[str] = []
    _agent_reach(merged.get("agent"), base.get("agent"), out)
    base_rows = {row.get("id"): row for row in base.get("plugin", []) if isinstance(row, dict)}
    for row in merged.get("plugin", []):
        if not isinstance(row, dict) or row.get("disabled") is True:
            continue
        if base_rows.get(row.get("id")) == row:
            continue  # as the installed preset has it
        name, row_id = str(row.get("name", "")), str(row.get("id", ""))
        where = f'plugin "{_show(name)}"' + (f' (id "{_show(row_id)}")' if row_id != name else "")
        found: list[str] = []
        _walk(row.get("config"), where, found)
        out.extend(found or [f"{where}: loaded (nothing it runs or reaches is configured)"])
    _permissions_reach(merged.get("permissions"), base.get("permissions"), out)
    sandbox = merged.get("sandbox")
    if not isinstance(sandbox, dict):  # read per file: whatever model [sandbox] gets
        sandbox = {}
        for _, layer_text in reversed(layers.texts):
            table = toml_table(layer_text, str(path)).get("sandbox")
            if isinstance(table, dict):
                sandbox.update(table)
    _sandbox_reach(sandbox, out)
    return out or ["nothing beyond the rows of the installed presets it extends"]


def _agent_reach(agent: Any, base: Any, out: list[str]) -> None:
    if not isinstance(agent, dict):
        return
    base = base if isinstance(base, dict) else {}
    model = agent.get("model")
    if isinstance(model, dict) and model != base.get("model"):
        what = f"adapter {_show(str(model.get('adapter', '?')))}"
        if model.get("model"):
            what += f", model {_show(str(model['model']))}"
        found: list[str] = []
        _walk(model.get("options"), "[agent.model]", found)
        out.append(f"[agent.model]: {what}")
        out.extend(found)
    cwd = agent.get("cwd")
    if isinstance(cwd, str) and cwd != base.get("cwd"):
        out.append(f"[agent]: works in {_show(cwd)}")


def _permissions_reach(table: Any, base: Any, out: list[str]) -> None:
    if not isinstance(table, dict):
        return
    base = base if isinstance(base, dict) else {}
    if table.get("default") == "allow" and base.get("default") != "allow":
        out.append('[permissions]: default = "allow": every governed tool runs without asking')
    tools = table.get("tools")
    below = base.get("tools") if isinstance(base.get("tools"), dict) else {}
    if isinstance(tools, dict):
        for tool, policy in tools.items():
            if policy == "allow" and below.get(tool) != "allow":
                out.append(f"[permissions]: {_show(tool)} runs without asking")


def _sandbox_reach(table: Mapping[str, Any], out: list[str]) -> None:
    if table.get("mode") == "off":
        out.append('[sandbox]: mode = "off": commands run unconfined')
    if table.get("network") is True:
        out.append("[sandbox]: network = true: commands reach the network")
    for key, value in table.items():
        if isinstance(value, list) and ("writ" in key or "allow" in key):
            out.append(f"[sandbox]: {_show(key)} = {_show(json.dumps(value))}")


def _walk(node: Any, where: str, out: list[str]) -> None:
    """Report what a row's config (or a nested table of it) runs or reaches, by key:
    ``command``/``args``, ``shell``, ``url``/``*_url``, ``*_env``, ``headers_env``,
    ``passthrough_env``, ``env``, ``permission``/``permission_mode``, ``cwd``."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            _walk(item, f"{where}[{index + 1}]", out)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("name"), str) and where.endswith("]"):
        where = f'{where} "{_show(node["name"])}"'
    command = node.get("command")
    if isinstance(command, str):
        args = node.get("args")
        argv = [command, *(str(a) for a in args)] if isinstance(args, list) else [command]
        out.append(f"{where}: runs {_show(shlex.join(argv))}")
    if isinstance(node.get("shell"), str):
        out.append(f"{where}: runs commands with {_show(node['shell'])}")
    if isinstance(node.get("cwd"), str):
        out.append(f"{where}: runs in {_show(node['cwd'])}")
    secrets = [f"${value} ({key})" for key, value in node.items() if _env_key(key, value)]
    headers = node.get("headers_env")
    if isinstance(headers, dict):
        secrets += [f"{_show(str(v))} (header {_show(str(h))})" for h, v in headers.items()]
    urls = [(k, v) for k, v in node.items() if isinstance(v, str) and _url_key(k)]
    for key, url in urls:
        host = _host(url)
        if secrets:
            sent = ", ".join(_show(s) for s in secrets)
            out.append(f"{where}: sends {sent} to {host} ({key} = {_show(url)})")
        else:
            out.append(f"{where}: reaches {host} ({key} = {_show(url)})")
    if secrets and not urls:
        out.append(f"{where}: uses the secret in {', '.join(_show(s) for s in secrets)}")
    passed = node.get("passthrough_env")
    if isinstance(passed, list) and passed:
        names = ", ".join(f"${_show(str(n))}" for n in passed)
        out.append(f"{where}: passes {names} through to its process")
    env = node.get("env")
    if isinstance(env, dict) and env:
        pairs = ", ".join(f"{_show(str(k))}={_show(str(v))}" for k, v in env.items())
        out.append(f"{where}: sets {pairs} in its process's environment")
    if node.get("permission") == "allow":
        out.append(f'{where}: permission = "allow": its requests are allowed without asking')
    if isinstance(node.get("permission_mode"), str):
        out.append(f'{where}: permission_mode = "{_show(node["permission_mode"])}"')
    for key, value in node.items():
        if isinstance(value, dict | list) and key not in ("env", "headers_env"):
            _walk(value, f"{where} {key}", out)


def _env_key(key: str, value: Any) -> bool:
    return isinstance(value, str) and key.endswith("_env") and key != "passthrough_env"


def _url_key(key: str) -> bool:
    return key == "url" or key.endswith("_url")


def _host(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    return f"host {_show(host)}" if host else f"{_show(url)}"


def _show(text: str) -> str:
    """``text`` safe for a terminal: control characters escaped, long text cut."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(shown) > _SHOWN_CHARACTERS:
        more = len(shown) - _SHOWN_CHARACTERS
        shown = f"{shown[:_SHOWN_CHARACTERS]}... ({more} more characters)"
    return shown


# -- finding a preset ------------------------------------------------------------------


def find_preset(
    value: str | None = None, *, cwd: Path | None = None, trust: bool = False
) -> Preset | None:
    """The preset a command runs (``--preset``, as ``dsh run``, ``dsh acp``, ``dsh a2a``
    and ``dsh worker`` read it): ``value`` as an existing file, else as a named preset;
    without ``value``, ``dsh.toml`` in ``cwd`` (default: the current directory), else the
    installed ``standard`` preset, else ``None``. :class:`PresetError` says what was
    looked for when ``value`` names nothing.

    A ``dsh.toml`` found in ``cwd`` is used only when it is trusted (``dsh trust``, see
    :func:`check_trust`) or ``trust`` is true (``--trust``): else
    :class:`UntrustedPresetError` lists what it would run or reach, before anything of
    it is loaded. A file named by ``value`` and named presets are trusted as they are."""
    if value is not None:
        file = Path(value).expanduser()
        if file.is_file():
            return load_preset(file)
        if not value.endswith(".toml") and "/" not in value and "\\" not in value:
            names = named_presets()
            if value in names:
                return load_named_preset(value)
            hint = did_you_mean(value, names)
            raise PresetError(
                f'no preset file "{value}" and no preset named "{value}"'
                + (f"; {hint}" if hint else "")
                + f" (named presets: {', '.join(sorted(names)) or 'none installed'})"
            )
        if file.exists():
            raise PresetError(f"preset {value} is not a file")
        raise PresetError(f"no preset file {value}")
    local = (cwd or Path.cwd()) / "dsh.toml"
    if local.is_file():
        if not trust:
            check_trust(local)
        return load_preset(local)
    if "standard" in named_presets():
        return load_named_preset("standard")
    return None


# -- the store ------------------------------------------------------------------------


def check_trust(path: str | Path) -> None:
    """Return if the preset file ``path`` is trusted as it is now (its content and that
    of the local files it extends); else raise :class:`UntrustedPresetError` listing
    what it would run or reach and how to trust it."""
    file = Path(path).resolve()
    layers = _layers(file)
    recorded = _read_store().get(str(file))
    if recorded is not None and recorded.get("sha256") == layers.digest:
        return
    raise UntrustedPresetError(
        file, layers.digest, _reach(file, layers), changed=recorded is not None
    )


def trust_preset(path: str | Path, *, digest: str | None = None) -> TrustedPreset:
    """Record the preset file ``path`` as trusted with its current content (or with
    ``digest``, the content that was shown to the user: if the file changed since,
    it is not trusted)."""
    file = Path(path).resolve()
    value = digest if digest is not None else preset_digest(file)
    now = time.time()
    with _locked() as entries:
        entries[str(file)] = {"sha256": value, "trusted_at": now}
    return TrustedPreset(file, value, now)


def revoke_trust(path: str | Path) -> bool:
    """Forget the trust of ``path``; whether it was trusted."""
    file = str(Path(path).resolve())
    with _locked() as entries:
        return entries.pop(file, None) is not None


def trusted_presets() -> list[TrustedPreset]:
    """Every recorded preset, in path order (also ones that changed or are gone:
    :attr:`TrustedPreset.current` says)."""
    return [
        TrustedPreset(Path(path), str(entry.get("sha256")), float(entry.get("trusted_at", 0)))
        for path, entry in sorted(_read_store().items())
    ]


def _read_store() -> dict[str, dict[str, Any]]:
    """The store's entries; an unreadable or malformed store trusts nothing."""
    try:
        data = json.loads(trust_store_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    entries = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return {}
    return {str(k): v for k, v in entries.items() if isinstance(v, dict)}


@contextlib.contextmanager
def _locked() -> Iterator[dict[str, dict[str, Any]]]:
    """The store's entries to change, written back atomically (mode 0600) on exit,
    under an exclusive lock so concurrent ``dsh trust`` runs lose nothing."""
    store = trust_store_path()
    try:
        store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(store.with_name(f".{STORE_NAME}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise PresetError(
            f"cannot record trust in {store}: {exc.strerror or exc} (set {STATE_DIR_ENV} to a"
            " writable folder)"
        ) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = _read_store()
        yield entries
        temporary = store.with_name(f".{STORE_NAME}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(fd, 0o600)  # also when an old temporary file was left with another mode
            json.dump({"version": 1, "presets": entries}, out, indent=2, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(fd)
        os.replace(temporary, store)
    except OSError as exc:
        raise PresetError(f"cannot record trust in {store}: {exc.strerror or exc}") from None
    finally:
        os.close(lock)
