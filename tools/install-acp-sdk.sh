#!/usr/bin/env bash
# Install the pinned TypeScript ACP SDK (@agentclientprotocol/sdk, the reference client) with npm,
# for the tests that drive `dsh acp` with it (packages/acp/dsh-acp/tests/test_acp_sdk_clients.py).
#
# Usage: tools/install-acp-sdk.sh [PREFIX]
#   PREFIX   install directory (default: $DSH_TOOLS_DIR/acp-sdk, else <repo>/.tools/acp-sdk;
#            <repo>/.tools/ is git-ignored)
#   env ACP_SDK_VERSION overrides the pinned version (default 2.4.0).
#
# Idempotent: when the pinned version is already installed it only re-checks it (well under 1 s).
# Progress goes to stderr; the only stdout line is the absolute path of the installed package
# (PREFIX/node_modules/@agentclientprotocol/sdk). Tests find it through env DSH_ACP_SDK_DIR, else
# <repo>/.tools/acp-sdk/node_modules/@agentclientprotocol/sdk.
set -euo pipefail

VERSION="${ACP_SDK_VERSION:-2.4.0}"
source "$(dirname "${BASH_SOURCE[0]}")/install-npm-pinned.sh"
npm_pinned_prefix acp-sdk 18 "${1:-}"
npm_pinned_install @agentclientprotocol/sdk "$VERSION"
PACKAGE="$PREFIX/node_modules/@agentclientprotocol/sdk"

# Smoke test: the package loads (an ES module) and has the client side the tests use.
node --input-type=module - "$PACKAGE" >&2 <<'JS'
import { pathToFileURL } from "node:url";
import { join } from "node:path";
const dir = process.argv[2];
const pkg = JSON.parse(await (await import("node:fs/promises")).readFile(join(dir, "package.json")));
const entry = pkg.exports["."].import;
const acp = await import(pathToFileURL(join(dir, entry)).href);
for (const name of ["client", "ndJsonStream", "PROTOCOL_VERSION"]) {
  if (!(name in acp)) {
    console.error(`install-acp-sdk.sh: ${entry} has no export ${name}`);
    process.exit(1);
  }
}
console.error(`install-acp-sdk.sh: @agentclientprotocol/sdk ${pkg.version} loads (protocol ${acp.PROTOCOL_VERSION})`);
JS
echo "$PACKAGE"
