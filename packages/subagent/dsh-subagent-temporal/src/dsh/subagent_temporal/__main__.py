"""``python -m dsh.subagent_temporal worker [options]``: the same as ``dsh worker``."""

from dsh.subagent_temporal._command import main

raise SystemExit(main())
