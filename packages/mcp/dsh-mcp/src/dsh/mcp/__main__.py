"""``python -m dsh.mcp``: the same as ``dsh mcp`` (without dsh-cli)."""

import sys

from dsh.mcp._command import main

sys.exit(main())
