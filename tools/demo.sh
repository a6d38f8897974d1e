#!/usr/bin/env bash
# The README's main-job command: the offline delegation demo (scripted model, real
# delegation through ctx.subagents to a spawned and a forked child).
#
# Installs only what the demo needs: uv if it is missing (tools/ensure-uv.sh), bubblewrap
# (tools/ensure-bwrap.sh: the sandbox tool processes run in), then the
# locked runtime dependencies of dsh-cli alone (no dev tools, no other provider: the
# Claude Code CLI bundled in claude-agent-sdk is not part of it) into an environment of
# its own, .venvs/demo (DSH_DEMO_ENV to put it elsewhere). Arguments go to `dsh demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/ensure-uv.sh
source tools/ensure-bwrap.sh
export UV_PROJECT_ENVIRONMENT="${DSH_DEMO_ENV:-$PWD/.venvs/demo}"
uv sync --frozen --quiet --no-dev --package dsh-cli
exec "$UV_PROJECT_ENVIRONMENT/bin/dsh" demo "$@"
