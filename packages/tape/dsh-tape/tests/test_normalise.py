"""Per-tape normalisation: a temporary folder, a date and a per-run field recorded in
one run replay in another run with other values; the answer gets this run's folder
back; a real change of the request still diverges; a change deep in a long text shows
in the divergence's diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from dsh.tape import ISO_DATE, PRODUCT_PATTERNS, Normalisation, TapeProxy, read_tape
from dsh.tape._format import unified_diff
from dsh.testing.model_servers import ChatReply, OpenAIChatServer, RecordedRequest

pytestmark = pytest.mark.timeout(30)


def request(folder: str, date: str, trace: str, task: str = "list the folder") -> dict[str, Any]:
    return {
        "model": "m",
        "trace": {"id": trace},
        "messages": [
            {"role": "system", "content": f"cwd: {folder}\nToday is {date}."},
            {"role": "user", "content": f"{task} {folder}/src"},
        ],
    }


def normalisation(folder: str) -> Normalisation:
    return Normalisation({"<TMP>": folder}, (ISO_DATE,), (("trace", "id"),))


def answer(req: RecordedRequest) -> ChatReply:
    """The model names the folder it was told about (as a model calling a tool would)."""
    return ChatReply(text="I looked in " + req.json["messages"][1]["content"].split()[-1])


def post(proxy: TapeProxy, body: dict[str, Any]) -> httpx.Response:
    url = proxy.base_url("openai") + "/chat/completions"
    return httpx.post(url, json=body, timeout=10)


def text_of(reply: httpx.Response) -> str:
    return str(reply.json()["choices"][0]["message"]["content"])


def test_a_run_in_another_folder_on_another_day_replays(tmp_path: Path) -> None:
    first, second = "/tmp/run-1/t0", "/tmp/run-22/t0"
    with OpenAIChatServer(default=answer) as server:
        upstreams = {"openai": server.api_base}
        normalise = normalisation(first)
        with TapeProxy(tmp_path, "record", upstreams, normalise=normalise) as proxy:
            recorded = post(proxy, request(first, "2026-12-04", "abc"))
        (sent,) = server.requests
    assert text_of(recorded) == f"I looked in {first}/src"  # the client gets the real one
    assert sent.json == request(first, "2026-12-04", "abc")  # and so does the upstream
    (line,) = read_tape(tmp_path).exchanges
    tape_text = json.dumps(line)
    assert first not in tape_text
    assert "2026-12-04" not in tape_text
    assert line["request"]["messages"][0]["content"] == "cwd: <TMP>\nToday is <DATE>."
    assert line["request"]["trace"] == {"id": "<VOLATILE>"}
    assert "I looked in <TMP>/src" in line["body"]

    with TapeProxy(tmp_path, "replay", normalise=normalisation(second)) as proxy:
        replayed = post(proxy, request(second, "2027-01-31", "xyz"))
    assert replayed.status_code == 200, replayed.text
    assert text_of(replayed) == f"I looked in {second}/src"  # this run's folder
    with TapeProxy(tmp_path, "replay", normalise=normalisation(second)) as proxy:
        changed = post(proxy, request(second, "2027-01-31", "xyz", task="delete"))
    assert changed.status_code == 409
    assert proxy.divergence is not None
    diff = proxy.divergence.diff
    assert '-   "content": "list the folder <TMP>/src",' in diff
    assert '+   "content": "delete <TMP>/src",' in diff


def test_without_the_normalisation_the_other_run_diverges(tmp_path: Path) -> None:
    with (
        OpenAIChatServer(default=answer) as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        post(proxy, request("/tmp/run-1/t0", "2026-12-04", "abc"))
    with TapeProxy(tmp_path, "replay") as proxy:
        assert post(proxy, request("/tmp/run-1/t0", "2026-12-04", "abc")).status_code == 200
    with TapeProxy(tmp_path, "replay") as proxy:
        assert post(proxy, request("/tmp/run-2/t0", "2026-12-04", "abc")).status_code == 409


def test_product_patterns() -> None:
    normalise = Normalisation(patterns=PRODUCT_PATTERNS)
    codex = "Chunk ID: 9cb494\nWall time: 0.0012 seconds\nProcess exited with code 3\nOutput:\nhi"
    assert normalise.request({"output": codex}) == {
        "output": "Chunk ID: <ID>\nWall time: <SECONDS> seconds\nProcess exited with code 3"
        "\nOutput:\nhi"
    }
    environment = (
        "<shell>zsh</shell>\n<current_date>2026-12-04</current_date>"
        "\n<timezone>Europe/Paris</timezone>"
    )
    assert normalise.request(environment) == (
        "<shell><SHELL></shell>\n<current_date><DATE></current_date>\n<timezone><TZ></timezone>"
    )
    claude = " - Platform: linux\n - Shell: bash\n - OS Version: Linux 6.18.44-fc\n - Next"
    assert normalise.request(claude) == (
        " - Platform: linux\n - Shell: <SHELL>\n - OS Version: <OS>\n - Next"
    )


def test_a_change_deep_in_a_long_line_shows_in_the_diff() -> None:
    recorded = {"system": "x" * 500 + " alpha " + "y" * 300}
    changed = {"system": "x" * 500 + " bravo " + "y" * 300}
    diff = unified_diff(recorded, changed)
    lines = diff.splitlines()[2:]  # after the --- and +++ lines
    removed = [line for line in lines if line.startswith("-")]
    added = [line for line in lines if line.startswith("+")]
    assert len(removed) == len(added) == 1
    assert " alpha " in removed[0]
    assert " bravo " in added[0]
    assert max(len(line) for line in diff.splitlines()) <= 160
