"""dsh.subagent_example_echo — an example subagent provider, complete and small.

The ``echo`` provider runs each child as a tiny Python process that speaks a line
protocol on stdin/stdout, on the provider kit (:class:`dsh.subprocess.SubprocessRun`):
progress items per word, usage unknown, cancel, teardown, the conformance suite.
Copy it to start a provider of your own::

    [[plugin]]
    name = "dsh-subagent-example-echo"
    config = { name = "echo", turn_timeout = 30 }
"""

from dsh.subagent_example_echo._provider import EchoConfig, EchoProvider, EchoRun, plugin

__all__ = ["EchoConfig", "EchoProvider", "EchoRun", "plugin"]
