#!/usr/bin/env bash
# Install the pinned TypeScript MCP SDK (@modelcontextprotocol/sdk, the reference client) with
# npm, for the tests that drive `dsh mcp` with it (packages/mcp/dsh-mcp/tests/test_ts_client.py).
#
# Usage: tools/install-mcp-sdk.sh [PREFIX]
#   PREFIX   install directory (default: $DSH_TOOLS_DIR/mcp-sdk, else <repo>/.tools/mcp-sdk;
#            <repo>/.tools/ is git-ignored)
#   env MCP_SDK_VERSION overrides the pinned version (default 1.32.2).
#
# Idempotent: when the pinned version is already installed it only re-checks it (well under 1 s).
# Progress goes to stderr; the only stdout line is the absolute path of the installed package
# (PREFIX/node_modules/@modelcontextprotocol/sdk). Tests find it through env DSH_MCP_SDK_DIR,
# else <repo>/.tools/mcp-sdk/node_modules/@modelcontextprotocol/sdk.
set -euo pipefail

VERSION="${MCP_SDK_VERSION:-1.32.2}"
source "$(dirname "${BASH_SOURCE[0]}")/install-npm-pinned.sh"
npm_pinned_prefix mcp-sdk 18 "${1:-}"
npm_pinned_install @modelcontextprotocol/sdk "$VERSION"
PACKAGE="$PREFIX/node_modules/@modelcontextprotocol/sdk"

# Smoke test: the client side the tests use loads (ES modules).
node --input-type=module - "$PACKAGE" >&2 <<'JS'
import { pathToFileURL } from "node:url";
import { join } from "node:path";
const dir = process.argv[2];
const pkg = JSON.parse(await (await import("node:fs/promises")).readFile(join(dir, "package.json")));
for (const [file, name] of [
  ["client/index.js", "Client"],
  ["client/stdio.js", "StdioClientTransport"],
  ["client/streamableHttp.js", "StreamableHTTPClientTransport"],
]) {
  const module = await import(pathToFileURL(join(dir, "dist", "esm", file)).href);
  if (!(name in module)) {
    console.error(`install-mcp-sdk.sh: dist/esm/${file} has no export ${name}`);
    process.exit(1);
  }
}
console.error(`install-mcp-sdk.sh: @modelcontextprotocol/sdk ${pkg.version} loads`);
JS
echo "$PACKAGE"
