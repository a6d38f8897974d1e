"""``python -m dsh.acp``: the same as ``dsh acp``."""

import sys

from dsh.acp._command import main

sys.exit(main())
