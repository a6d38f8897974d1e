"""The dsh-testing pytest plugin is opt-in: installing dsh-testing changes no one's test run.

A temporary project with a test that leaves a child process running and a test that
skips is run twice under ``CI=true`` with dsh-testing importable: as it is, the run
is the project's own (the leak passes, the skip is a skip, no subreaper, no plugin);
with ``-p dsh.testing.pytest_plugin`` both tests fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.testing.processes import alive, reap_zombies, wait_until_gone

pytestmark = pytest.mark.timeout(90)

PROJECT_CONFIG = """\
[project]
name = "someone-elses-project"
version = "0"

[tool.pytest.ini_options]
"""

PROJECT_TESTS = '''\
import ctypes
import json
import os
import subprocess
import sys

import pytest

import dsh.testing.pytest_plugin  # importable; importing it turns nothing on

# Exits once its parent (this test run) is gone, or after 30 s.
SLEEPER = """
import os, time
parent = os.getppid()
for _ in range(600):
    if os.getppid() != parent:
        break
    time.sleep(0.05)
"""


def test_leaves_a_child_running():
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    with open(os.environ["LEAK_PIDFILE"], "w") as handle:
        handle.write(str(child.pid))


def test_skips():
    pytest.skip("the frobnicator is not installed")


def test_reports_its_surroundings(request):
    subreaper = None
    if sys.platform.startswith("linux"):
        value = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(37, ctypes.byref(value), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        subreaper = bool(value.value)
    plugin = request.config.pluginmanager.has_plugin("dsh.testing.pytest_plugin")
    with open(os.environ["SURROUNDINGS_FILE"], "w") as handle:
        json.dump({"plugin": plugin, "subreaper": subreaper}, handle)
'''


@dataclass
class Outcome:
    returncode: int
    tests: dict[str, tuple[str, str]]
    """test name → (passed | failed | skipped | error, message)."""
    surroundings: dict[str, object]
    output: str


def run_project(tmp_path: Path, *args: str, conftest: str | None = None) -> Outcome:
    """Run pytest on the temporary project under CI=true; kill the leaked child."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    if conftest is not None:
        (project / "conftest.py").write_text(conftest)
    (project / "pyproject.toml").write_text(PROJECT_CONFIG)
    (project / "test_project.py").write_text(PROJECT_TESTS)
    pidfile = tmp_path / "leaked.pid"
    surroundings = tmp_path / "surroundings.json"
    report = tmp_path / "report.xml"
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    env.update(CI="true", LEAK_PIDFILE=str(pidfile), SURROUNDINGS_FILE=str(surroundings))
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                *args,
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=project,
            timeout=60,
        )
    finally:
        if pidfile.exists():
            leaked = int(pidfile.read_text())
            if alive(leaked):
                os.kill(leaked, signal.SIGKILL)
            wait_until_gone([leaked], 10)
            reap_zombies()  # re-parented to this (subreaper) test runner
    tests: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = "failed" if kind == "failure" else kind
                message = (element.get("message") or "") + (element.text or "")
                break
        tests[case.get("name", "")] = (outcome, message)
    return Outcome(
        done.returncode,
        tests,
        json.loads(surroundings.read_text()),
        done.stdout + done.stderr,
    )


def test_without_opting_in_the_run_is_unchanged(tmp_path: Path) -> None:
    outcome = run_project(tmp_path)
    assert outcome.returncode == 0, outcome.output
    assert outcome.tests == {
        "test_leaves_a_child_running": ("passed", ""),
        "test_skips": ("skipped", outcome.tests["test_skips"][1]),
        "test_reports_its_surroundings": ("passed", ""),
    }, outcome.output
    assert "the frobnicator is not installed" in outcome.tests["test_skips"][1]
    assert outcome.surroundings["plugin"] is False
    assert outcome.surroundings["subreaper"] in (False, None)  # None: not Linux


# Where there is no /proc the plugin asks psutil; force that path here too.
PSUTIL_ONLY = "import dsh.testing.processes\n\ndsh.testing.processes._USE_PROC = False\n"


@pytest.mark.parametrize("table", ["default", "psutil"])
def test_opting_in_with_p_fails_the_leak_and_the_skip(tmp_path: Path, table: str) -> None:
    conftest = PSUTIL_ONLY if table == "psutil" else None
    outcome = run_project(tmp_path, "-p", "dsh.testing.pytest_plugin", conftest=conftest)
    assert outcome.returncode == 1, outcome.output
    leak, leak_message = outcome.tests["test_leaves_a_child_running"]
    assert leak == "error", outcome.output  # the check fails the test at teardown
    assert "test left processes running" in leak_message
    skip, skip_message = outcome.tests["test_skips"]
    assert skip == "failed", outcome.output
    assert "skipped under CI=true" in skip_message
    assert outcome.tests["test_reports_its_surroundings"][0] == "passed"
    assert outcome.surroundings["plugin"] is True
    if sys.platform.startswith("linux"):
        assert outcome.surroundings["subreaper"] is True


def test_opting_in_from_a_conftest(tmp_path: Path) -> None:
    outcome = run_project(tmp_path, conftest='pytest_plugins = ["dsh.testing.pytest_plugin"]\n')
    assert outcome.returncode == 1, outcome.output
    assert outcome.tests["test_leaves_a_child_running"][0] == "error"
    assert outcome.tests["test_skips"][0] == "failed"
    assert outcome.surroundings["plugin"] is True
