"""scrubbed_env and SubprocessConfig: what a child inherits, by name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dsh.subprocess import SAFE_ENV_NAMES, SubprocessConfig, scrubbed_env

BASE = {
    "PATH": "/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "LC_CTYPE": "C.UTF-8",
    "LC_TIME": "en_GB.UTF-8",
    "XDG_CONFIG_HOME": "/root/.config",
    "XDG_RUNTIME_DIR": "/run/user/0",
    "XDG_DATA_DIRS": "/usr/share",
    # credentials, by their usual names
    "OPENAI_API_KEY": "sk-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "AWS_SECRET_ACCESS_KEY": "x",
    "GITHUB_TOKEN": "ghp",
    "HTTPS_PROXY": "http://user:pw@proxy",
    "http_proxy": "http://user:pw@proxy",
    # and under the prefixes whose standard names are kept: arbitrary names are dropped
    "LC_SECRET": "hunter2",
    "LC_API_KEY": "sk-lc",
    "LC_": "x",
    "XDG_TOKEN": "t0k3n",
    "XDG_SESSION_COOKIE": "c",
    "XDG_CONFIG_HOME_EXTRA": "x",
    # and the rest
    "DSH_PROCESS_TAG": "someone/else",
    "DSH_DELEGATION_DEPTH": "7",
    "CUSTOM": "1",
    "OTHER": "2",
}


def test_credentials_and_arbitrary_prefixed_names_are_dropped() -> None:
    env = scrubbed_env(base=BASE)
    assert env == {
        "PATH": "/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LC_CTYPE": "C.UTF-8",
        "LC_TIME": "en_GB.UTF-8",
        "XDG_CONFIG_HOME": "/root/.config",
        "XDG_RUNTIME_DIR": "/run/user/0",
        "XDG_DATA_DIRS": "/usr/share",
    }


def test_every_listed_locale_and_xdg_name_is_kept_and_nothing_else_with_the_prefix() -> None:
    listed = sorted(n for n in SAFE_ENV_NAMES if n.startswith(("LC_", "XDG_")))
    assert {"LC_ALL", "LC_MESSAGES", "LC_NUMERIC", "XDG_CACHE_HOME", "XDG_STATE_HOME"} <= set(
        listed
    )
    base = {name: "v" for name in listed}
    base.update({name + "X": "v" for name in listed})  # a look-alike of each
    assert sorted(scrubbed_env(base=base)) == listed


def test_passthrough_and_extra() -> None:
    env = scrubbed_env(
        {"FAKE_API_KEY": "fake", "PATH": "/opt/bin"},
        base=BASE,
        passthrough=["CUSTOM", "OPENAI_API_KEY", "LC_SECRET", "NOT_SET"],
    )
    assert env["CUSTOM"] == "1"
    assert env["OPENAI_API_KEY"] == "sk-secret"  # asked for by name
    assert env["LC_SECRET"] == "hunter2"
    assert "NOT_SET" not in env
    assert env["FAKE_API_KEY"] == "fake"
    assert env["PATH"] == "/opt/bin"  # extra wins
    assert "OTHER" not in env
    assert "GITHUB_TOKEN" not in env
    with pytest.raises(TypeError, match="env value for 'N'"):
        scrubbed_env({"N": 1}, base={})  # type: ignore[dict-item]


def test_the_real_environment_is_the_default_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_TOKEN", "t0k3n")
    monkeypatch.setenv("LC_SECRET", "s")
    monkeypatch.setenv("LC_ALL", "C")
    env = scrubbed_env()
    assert "XDG_TOKEN" not in env
    assert "LC_SECRET" not in env
    assert env["LC_ALL"] == "C"


def test_subprocess_config_fields() -> None:
    config = SubprocessConfig(
        command="agent", args=["--stdio"], env={"A": "1"}, passthrough_env=["OPENAI_API_KEY"]
    )
    assert config.argv == ["agent", "--stdio"]
    assert (config.eof_grace, config.term_grace) == (2.0, 2.0)
    assert config.turn_timeout is not None  # out-of-process runs are bounded by default
    with pytest.raises(ValidationError, match="cwd must be an absolute path"):
        SubprocessConfig(command="agent", cwd="relative")
    with pytest.raises(ValidationError, match="invalid environment variable name"):
        SubprocessConfig(command="agent", env={"A=B": "1"})
    with pytest.raises(ValidationError, match="invalid environment variable name"):
        SubprocessConfig(command="agent", passthrough_env=[""])
    with pytest.raises(ValidationError, match="extra"):
        SubprocessConfig(command="agent", turn_timout=5)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        SubprocessConfig(command="")


def test_a_provider_child_gets_the_run_tape(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DSH_TAPE_PROXY`` passes the scrub of every provider's child (as the lineage
    does): a ``dsh acp`` child's own codex or claude-code rows use the same tape."""
    from dsh.subagent.kit import TAPE_PROXY_VARIABLE
    from dsh.subprocess import provider_env

    config = SubprocessConfig()
    monkeypatch.delenv(TAPE_PROXY_VARIABLE, raising=False)
    assert TAPE_PROXY_VARIABLE not in provider_env(config)
    monkeypatch.setenv(TAPE_PROXY_VARIABLE, "http://127.0.0.1:1/token")
    assert provider_env(config)[TAPE_PROXY_VARIABLE] == "http://127.0.0.1:1/token"
    assert TAPE_PROXY_VARIABLE not in scrubbed_env()  # only a provider's children get it
