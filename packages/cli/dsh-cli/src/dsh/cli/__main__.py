"""``python -m dsh.cli``."""

from dsh.cli._main import main

raise SystemExit(main())
