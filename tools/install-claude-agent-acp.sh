#!/usr/bin/env bash
# Install the pinned claude-agent-acp (@agentclientprotocol/claude-agent-acp, Claude Code as an
# ACP agent) with npm, for dsh's acp provider tests that drive it for real.
#
# Usage: tools/install-claude-agent-acp.sh [PREFIX]
#   PREFIX   install directory (default: $DSH_TOOLS_DIR/claude-agent-acp, else
#            <repo>/.tools/claude-agent-acp; <repo>/.tools/ is git-ignored)
#   env CLAUDE_AGENT_ACP_VERSION overrides the pinned version (default 0.101.0).
#
# Idempotent: when the pinned version is already installed it only re-checks it (about 2 s).
# Progress goes to stderr; the only stdout line is the absolute path of the agent's entry point
# (dist/index.js, run it with `node`), also linked as PREFIX/bin/claude-agent-acp.js. Tests find
# it through env DSH_CLAUDE_AGENT_ACP, else <repo>/.tools/claude-agent-acp/bin/claude-agent-acp.js.
#
# The Claude Code CLI it drives comes with it: the native binary of the platform package that
# @anthropic-ai/claude-agent-sdk (its dependency) pulls in as an optional dependency (~320 MB).
# Run the entry point with `node`, not the .bin shim. It declares Node >= 22; 0.101.0 works on 20.
set -euo pipefail

VERSION="${CLAUDE_AGENT_ACP_VERSION:-0.101.0}"
PACKAGE="@agentclientprotocol/claude-agent-acp"
source "$(dirname "${BASH_SOURCE[0]}")/install-npm-pinned.sh"
npm_pinned_prefix claude-agent-acp 20 "${1:-}"
ENTRY="$PREFIX/node_modules/$PACKAGE/dist/index.js"

find_cli() {
  # The Claude Code CLI: the native binary of @anthropic-ai/claude-agent-sdk-<os>-<arch>.
  find "$PREFIX/node_modules" -path '*@anthropic-ai/claude-agent-sdk-*' -type f -name claude \
    -perm -u+x 2>/dev/null | head -n1
}

npm_pinned_install "$PACKAGE" "$VERSION" "$(find_cli)" --include=optional
if [[ ! -f "$ENTRY" ]]; then
  echo "install-claude-agent-acp.sh: $PACKAGE@$VERSION is not at $ENTRY after npm install" >&2
  exit 1
fi
if [[ -z "$(find_cli)" ]]; then
  echo "install-claude-agent-acp.sh: no Claude Code CLI under $PREFIX/node_modules" \
    "(is there a @anthropic-ai/claude-agent-sdk platform package for $(uname -s)/$(uname -m)?)" >&2
  exit 1
fi
mkdir -p "$PREFIX/bin"
ln -sfn "$ENTRY" "$PREFIX/bin/claude-agent-acp.js"

# Smoke test: the agent answers `initialize` on stdio (no model is asked; the CLI is not started).
CHECK="$(mktemp -d "$PREFIX/.check.XXXXXX")"
trap 'rm -rf "$CHECK"' EXIT
mkdir -p "$CHECK/home" "$CHECK/config" "$CHECK/tmp"
env -i PATH="$PATH" HOME="$CHECK/home" CLAUDE_CONFIG_DIR="$CHECK/config" TMPDIR="$CHECK/tmp" \
  CLAUDE_CODE_TMPDIR="$CHECK/tmp" DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
  node -e "$NPM_PINNED_ACP_CHECK" "$NPM_PINNED_SELF" 30 "$ENTRY" "$VERSION" "$CHECK" >&2
echo "$ENTRY"
