"""The provider conformance suite: the lifecycle rules every provider keeps.

Subclass :class:`ProviderConformance` in your provider's tests and give it a
``harness`` fixture that yields a :class:`ConformanceHarness` (an open context
with your provider registered, a parent agent, and three prompts your child
answers by completing, hanging until cancelled, and failing)::

    class TestMyProvider(ProviderConformance):
        @pytest.fixture
        async def harness(self) -> AsyncIterator[ConformanceHarness]:
            async with Context.open(preset) as ctx:
                ...
                yield ConformanceHarness(ctx, "mine", parent, complete_prompt="say hi",
                                         expected_output="hi", hang_prompt="hang",
                                         fail_prompt="fail")

The rules it checks (a failure reads ``conformance rule '<rule>' broken: <what>``,
never a bare timeout):

* the capability gate runs before ``start`` (and starts nothing);
* abort before publication raises and emits nothing; abort during ``start``
  either raises or settles ``aborted``;
* cancel after publication settles ``aborted`` within ``cancel_bound``;
* ``dispose`` is idempotent and concurrent-safe, also when the task awaiting it
  is cancelled one loop tick after the first call, and it leaves the child
  quiescent: an in-process child agent is no longer running, and no task created
  on behalf of the run is still pending when ``dispose`` returns;
* exactly one ``subagent/start``/``subagent/end`` pair per run, scoped to the parent;
* a completed run has the expected output; a child failure settles ``error`` with
  a diagnostic and never raises; every result's ``usage`` is a ``SubagentUsage``;
* ``run.progress()`` yields progress items and ends once the run has settled;
* no child process is left behind.

Which tasks belong to a run: the suite installs a task factory on the running loop
(``loop.set_task_factory``, public asyncio API) for the length of each test and
marks, with a context variable, the code that starts and disposes the run. A task
is created in its creator's context, and a callback scheduled with ``call_soon``
runs in the context it was scheduled from, so every task the provider creates
for the run, directly or through callbacks (an agent's turn, a kit's driver, a
process's pumps), carries the mark; tasks of unrelated machinery (a fake model
server's connection handlers, other tests) do not. No private attribute of any
provider, agent or context is read. A task meant to outlive runs (a warm pool's, say)
is created in a context of its own (``loop.create_task(coro,
context=contextvars.Context())``) or before the first run.

The processes the suite counts are those ``live_children`` of this module returns,
read at each check: a provider with a warm pool may replace it in its tests
(``monkeypatch.setattr(conformance, "live_children", ...)``) to leave the pool's idle
processes, which belong to no run, out.
"""

from dsh.testing._conformance._harness import ConformanceHarness, assert_no_new_processes
from dsh.testing._conformance._suite import ProviderConformance
from dsh.testing._processes import live_children as live_children

__all__ = ["ConformanceHarness", "ProviderConformance", "assert_no_new_processes"]
