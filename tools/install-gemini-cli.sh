#!/usr/bin/env bash
# Install the pinned Gemini CLI (@google/gemini-cli) with npm, for dsh's acp provider tests that
# drive it for real as an ACP agent (`gemini --acp`) against the fake Gemini API server.
#
# Usage: tools/install-gemini-cli.sh [PREFIX]
#   PREFIX   install directory (default: $DSH_TOOLS_DIR/gemini-cli, else
#            <repo>/.tools/gemini-cli; <repo>/.tools/ is git-ignored)
#   env GEMINI_CLI_VERSION overrides the pinned version (default 0.61.0).
#
# Idempotent: when the pinned version is already installed it only re-checks it (about 2 s).
# Progress goes to stderr; the only stdout line is the absolute path of the CLI's entry point
# (bundle/gemini.js, run it with `node`), also linked as PREFIX/bin/gemini.js. Tests find it
# through env DSH_GEMINI_CLI, else <repo>/.tools/gemini-cli/bin/gemini.js.
#
# The package is one esbuild bundle (~100 MB unpacked); its optional dependencies (node-pty,
# keytar) are left out: in ACP mode the CLI needs neither. It declares Node >= 20.
set -euo pipefail

VERSION="${GEMINI_CLI_VERSION:-0.61.0}"
PACKAGE="@google/gemini-cli"
source "$(dirname "${BASH_SOURCE[0]}")/install-npm-pinned.sh"
npm_pinned_prefix gemini-cli 20 "${1:-}"
ENTRY="$PREFIX/node_modules/$PACKAGE/bundle/gemini.js"

npm_pinned_install "$PACKAGE" "$VERSION" present --omit=optional
if [[ ! -f "$ENTRY" ]]; then
  echo "install-gemini-cli.sh: $PACKAGE@$VERSION is not at $ENTRY after npm install" >&2
  exit 1
fi
mkdir -p "$PREFIX/bin"
ln -sfn "$ENTRY" "$PREFIX/bin/gemini.js"

# Smoke test: the CLI answers `initialize` on stdio in ACP mode (no model is asked), offline:
# a throwaway home, no relaunch into a child process.
CHECK="$(mktemp -d "$PREFIX/.check.XXXXXX")"
trap 'rm -rf "$CHECK"' EXIT
mkdir -p "$CHECK/home/.gemini" "$CHECK/tmp"
echo '{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false}}' \
  >"$CHECK/home/.gemini/settings.json"
env -i PATH="$PATH" HOME="$CHECK/home" GEMINI_CLI_HOME="$CHECK/home" TMPDIR="$CHECK/tmp" \
  GEMINI_CLI_NO_RELAUNCH=1 NO_COLOR=1 \
  node -e "$NPM_PINNED_ACP_CHECK" "$NPM_PINNED_SELF" 60 "$ENTRY" "$VERSION" "$CHECK" --acp >&2
echo "$ENTRY"
