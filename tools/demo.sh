#!/usr/bin/env bash
# The README's main-job command: the offline delegation demo (scripted model, real
# delegation through ctx.subagents to a spawned and a forked child). Installs uv if needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/ensure-uv.sh
uv sync --frozen --quiet
exec uv run --frozen dsh demo "$@"
