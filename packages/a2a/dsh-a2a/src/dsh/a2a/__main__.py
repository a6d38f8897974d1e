"""``python -m dsh.a2a``: the same as ``dsh a2a`` (without dsh-cli)."""

import sys

from dsh.a2a._command import main

sys.exit(main())
