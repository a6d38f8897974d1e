"""Each test records workspace trust in a folder of its own, and waits for the watchdogs
of the dsh processes it ran to finish (dsh-testing's shared fixtures)."""

from dsh.testing._acp_fixtures import dsh_state_dir, dsh_watchdogs_gone

__all__ = ["dsh_state_dir", "dsh_watchdogs_gone"]
