#!/usr/bin/env bash
# Install the pinned OpenAI Codex CLI (@openai/codex) with npm, for dsh's codex provider tests.
#
# Usage: tools/install-codex.sh [PREFIX]
#   PREFIX   install directory (default: $DSH_TOOLS_DIR/codex, else <repo>/.tools/codex;
#            <repo>/.tools/ is git-ignored)
#   env CODEX_VERSION overrides the pinned version (default 0.171.0).
#
# Idempotent: when the pinned version is already installed it only re-checks it (about 1 s).
# Progress goes to stderr; the only stdout line is the absolute path of the native codex binary,
# also linked as PREFIX/bin/codex. Tests find the binary through env DSH_CODEX_BIN, else
# <repo>/.tools/codex/bin/codex.
#
# Run the native binary, not the Node shim (node_modules/.bin/codex): on Node 20 the shim spawns
# the binary as its own child, so a SIGKILL to the shim orphans it.
set -euo pipefail

VERSION="${CODEX_VERSION:-0.171.0}"
source "$(dirname "${BASH_SOURCE[0]}")/install-npm-pinned.sh"
npm_pinned_prefix codex 18 "${1:-}"

find_native() {
  # The native binary comes in the platform package, an optional dependency of @openai/codex
  # (npm alias @openai/codex-<os>-<arch>); it may be hoisted or nested.
  find "$PREFIX/node_modules" -path '*@openai/codex-*' -path '*/vendor/*' -type f -name codex \
    -perm -u+x 2>/dev/null | head -n1
}

npm_pinned_install @openai/codex "$VERSION" "$(find_native)" --include=optional

BIN="$(find_native)"
if [[ -z "$BIN" ]]; then
  echo "install-codex.sh: no native codex binary under $PREFIX/node_modules" \
    "(is there a @openai/codex platform package for $(uname -s)/$(uname -m)?)" >&2
  exit 1
fi
mkdir -p "$PREFIX/bin"
ln -sfn "$BIN" "$PREFIX/bin/codex"

# Even `codex --version` writes under $CODEX_HOME (default ~/.codex), so check with a throwaway
# HOME/CODEX_HOME, and a private TMPDIR that does not contain CODEX_HOME (else codex warns).
CHECK="$(mktemp -d "$PREFIX/.check.XXXXXX")"
trap 'rm -rf "$CHECK"' EXIT
mkdir -p "$CHECK/home/.codex" "$CHECK/tmp"
got="$(env -i PATH="$PATH" HOME="$CHECK/home" CODEX_HOME="$CHECK/home/.codex" \
  TMPDIR="$CHECK/tmp" "$BIN" --version)"
if [[ "$got" != *"$VERSION"* ]]; then
  echo "install-codex.sh: $BIN --version says '$got', expected $VERSION" >&2
  exit 1
fi
echo "install-codex.sh: $got" >&2

# Smoke test: `codex app-server` answers `initialize` on stdio. Keep stdin open until the reply
# arrives (codex exits ~30 ms after stdin EOF and abandons requests in flight).
env -i PATH="$PATH" HOME="$CHECK/home" CODEX_HOME="$CHECK/home/.codex" TMPDIR="$CHECK/tmp" \
  node - "$BIN" >&2 <<'JS'
const { spawn } = require("child_process");
const bin = process.argv[2];
const p = spawn(bin, ["app-server", "-c", "features.plugins=false", "-c", "features.apps=false",
  "-c", "features.remote_plugin=false", "-c", "analytics.enabled=false"],
  { stdio: ["pipe", "pipe", "ignore"] });
const timer = setTimeout(() => {
  console.error("install-codex.sh: app-server smoke test timed out"); p.kill("SIGKILL"); process.exit(1);
}, 20000);
let buf = "";
let done = false;
p.stdout.on("data", (d) => {
  buf += d;
  const lines = buf.split("\n");
  buf = lines.pop();
  for (const line of lines) {
    const m = JSON.parse(line);
    if (m.id === 1 && !done) {
      done = true;
      if (!m.result) {
        console.error("install-codex.sh: app-server initialize failed: " + line); process.exit(1);
      }
      p.on("exit", (code) => {
        clearTimeout(timer);
        console.error(`install-codex.sh: app-server initialize OK (exit ${code} after stdin EOF)`);
      });
      p.stdin.end();
      return;
    }
  }
});
p.stdin.write(JSON.stringify({ method: "initialize", id: 1, params: {
  clientInfo: { name: "dsh-install-check", title: null, version: "0" }, capabilities: null } }) + "\n");
JS
echo "$BIN"
