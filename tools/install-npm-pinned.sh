#!/usr/bin/env bash
# Source me from an installer of a pinned npm package (tools/install-codex.sh, install-gemini-cli.sh,
# tools/install-claude-agent-acp.sh, tools/install-acp-sdk.sh): what they share. Messages go to
# stderr, prefixed with the installer's name; a failure exits the installer with status 1.
#
#   npm_pinned_prefix DIR NODE [PREFIX]
#     node and npm must be on PATH (else it says to install Node.js >= NODE with npm). Sets
#     PREFIX, the install directory: the argument, else $DSH_TOOLS_DIR/DIR, else <repo>/.tools/DIR
#     (<repo>/.tools/ is git-ignored); created, and made absolute.
#   npm_pinned_version PACKAGE
#     prints the version of PACKAGE installed in PREFIX (nothing when there is none).
#   npm_pinned_install PACKAGE VERSION [FOUND [NPM-ARG...]]
#     `npm install PACKAGE@VERSION` into PREFIX (npm's output to stderr), unless that version is
#     installed already and FOUND is not empty: FOUND is what the installer found of a part the
#     version does not vouch for (the native binary an optional platform package brings); leave
#     it out when there is none. Then PREFIX must hold PACKAGE at VERSION.
#   NPM_PINNED_ACP_CHECK
#     a node script, the smoke test of an ACP agent: run it under the agent's offline
#     environment as `node -e "$NPM_PINNED_ACP_CHECK" LABEL SECONDS ENTRY VERSION CWD [ARG...]`.
#     It starts `node ENTRY ARG...` in CWD, sends `initialize` on stdin and needs, within
#     SECONDS, an answer with protocol version 1 and agentInfo.version VERSION (no model is
#     asked); then it closes stdin and waits for the agent to exit. Messages go to stderr.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "install-npm-pinned.sh: source it from an installer (see its header); it installs nothing itself" >&2
  exit 2
fi

NPM_PINNED_SELF="$(basename "$0")"
NPM_PINNED_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

npm_pinned_prefix() {
  local dir="$1" node="$2" tool
  for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "$NPM_PINNED_SELF: '$tool' not found on PATH; install Node.js >= $node (with npm) first" >&2
      exit 1
    fi
  done
  PREFIX="${3:-${DSH_TOOLS_DIR:+$DSH_TOOLS_DIR/$dir}}"
  PREFIX="${PREFIX:-$NPM_PINNED_REPO/.tools/$dir}"
  mkdir -p "$PREFIX"
  PREFIX="$(cd "$PREFIX" && pwd)"
}

npm_pinned_version() {
  node -e 'try{console.log(require(process.argv[1]).version)}catch(e){}' \
    "$PREFIX/node_modules/$1/package.json" 2>/dev/null || true
}

npm_pinned_install() {
  local package="$1" version="$2" found="${3-present}" got
  shift "$(($# < 3 ? $# : 3))"
  if [[ "$(npm_pinned_version "$package")" != "$version" || -z "$found" ]]; then
    echo "$NPM_PINNED_SELF: installing $package@$version into $PREFIX" >&2
    npm install --prefix "$PREFIX" --no-audit --no-fund --no-save --loglevel=error \
      "$@" "$package@$version" >&2
  else
    echo "$NPM_PINNED_SELF: $package@$version already installed in $PREFIX" >&2
  fi
  got="$(npm_pinned_version "$package")"
  if [[ "$got" != "$version" ]]; then
    echo "$NPM_PINNED_SELF: $PREFIX/node_modules/$package/package.json says version" \
      "'$got', expected $version" >&2
    exit 1
  fi
}

NPM_PINNED_ACP_CHECK='
const { spawn } = require("child_process");
const [label, seconds, entry, version, cwd, ...args] = process.argv.slice(1);
const p = spawn(process.execPath, [entry, ...args], { cwd, stdio: ["pipe", "pipe", "ignore"] });
const timer = setTimeout(() => {
  console.error(label + ": initialize smoke test timed out");
  p.kill("SIGKILL");
  process.exit(1);
}, Number(seconds) * 1000);
let buf = "";
p.stdout.on("data", (d) => {
  buf += d;
  const lines = buf.split("\n");
  buf = lines.pop();
  for (const line of lines) {
    let m;
    try { m = JSON.parse(line); } catch (e) { continue; }
    if (m.id !== 1) continue;
    const info = (m.result && m.result.agentInfo) || {};
    if (!m.result || m.result.protocolVersion !== 1 || info.version !== version) {
      console.error(label + ": unexpected initialize answer: " + line);
      p.kill("SIGKILL");
      process.exit(1);
    }
    p.on("exit", () => {
      clearTimeout(timer);
      console.error(`${label}: ${info.name} ${info.version} initialize OK`);
    });
    p.stdin.end();
    return;
  }
});
p.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
  protocolVersion: 1, clientCapabilities: { fs: { readTextFile: false, writeTextFile: false },
  terminal: false } } }) + "\n");
'
