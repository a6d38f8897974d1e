"""``python -m dsh.cli``."""

from dsh.cli.main import main

raise SystemExit(main())
