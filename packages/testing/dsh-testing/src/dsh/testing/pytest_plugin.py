"""The dsh-testing pytest plugin. Opt-in: installing dsh-testing changes no test run.

A project turns it on for its whole run on the command line or in its config::

    pytest -p dsh.testing.pytest_plugin

    # pyproject.toml
    [tool.pytest.ini_options]
    addopts = "-p dsh.testing.pytest_plugin"

or from its top-level ``conftest.py``::

    pytest_plugins = ["dsh.testing.pytest_plugin"]

Once on, it:

* fails every test that leaves a live process behind (a child, or an orphaned
  descendant: the test runner makes itself a *child subreaper* on Linux
  (``PR_SET_CHILD_SUBREAPER``), so orphaned grandchildren are re-parented to it
  and counted too, instead of escaping to init). This process's dsh watchdog is
  not counted. Works without ``/proc`` (psutil), so it is no silent pass off Linux;
* turns a skip into a failure under ``CI=true``: a missing prerequisite must not
  pass silently there;
* provides an ``anyio_backend`` fixture: dsh runs on asyncio;
* provides the ``tape`` fixture (VCR-style): ``proxy = tape("name", openai=url)``
  replays ``tapes/<name>/`` beside the test file with no server and no key, and
  records it (forwarding to ``url``) when pytest runs with ``--record-tapes``; point
  the model at ``proxy.base_url("openai")``. ``DSH_TAPE_PROXY`` is set for the test,
  so child processes and the codex and claude-code providers use the same tape.
"""

from dsh.testing._pytest_plugin import (
    LEAK_GRACE,
    anyio_backend,
    no_leaked_processes,
    pytest_addoption,
    pytest_configure,
    pytest_runtest_makereport,
)
from dsh.testing._tape_fixture import TapeFactory, tape

__all__ = [
    "LEAK_GRACE",
    "TapeFactory",
    "anyio_backend",
    "no_leaked_processes",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_makereport",
    "tape",
]
