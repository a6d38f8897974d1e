// The TypeScript MCP SDK's client (@modelcontextprotocol/sdk) driving `dsh mcp`, for
// test_ts_client.py. One JSON object per stdout line: {"event": ...}.
//
//   node mcp_ts_client.mjs SDK_DIR SCENARIO stdio -- COMMAND ARG...
//   node mcp_ts_client.mjs SDK_DIR SCENARIO http URL
//
// SCENARIO: "list" (the tools), "call" (an ECHO call with a progress token),
// "cancel" (a SLEEP call, aborted when a line "cancel" arrives on stdin, then one more
// call), "fail" (a FAIL call).
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [sdk, scenario, kind, ...rest] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", file)).href);
const { Client } = await load("client/index.js");
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

let transport;
if (kind === "stdio") {
  const { StdioClientTransport } = await load("client/stdio.js");
  const [command, ...args] = rest.slice(rest.indexOf("--") + 1);
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
} else {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(rest[0]));
}
const client = new Client({ name: "dsh-mcp-ts-test", version: "0" });
await client.connect(transport);

const call = (prompt, options = {}) =>
  client.callTool({ name: "delegate", arguments: { description: "ts", prompt } }, undefined, {
    timeout: 120000,
    onprogress: (progress) => emit({ event: "progress", message: progress.message ?? "" }),
    ...options,
  });
const result = (value) => ({
  event: "result",
  isError: Boolean(value.isError),
  text: (value.content ?? []).map((block) => block.text ?? "").join(""),
  meta: value._meta ?? null,
});

try {
  if (scenario === "list") {
    const { tools } = await client.listTools();
    emit({ event: "tools", tools });
  } else if (scenario === "call") {
    emit(result(await call("ECHO something")));
  } else if (scenario === "fail") {
    emit(result(await call("FAIL")));
  } else if (scenario === "cancel") {
    const controller = new AbortController();
    const lines = createInterface({ input: process.stdin });
    lines.on("line", (line) => {
      if (line.trim() === "cancel") controller.abort("cancelled by the test");
    });
    try {
      await call("SLEEP", { signal: controller.signal });
      emit({ event: "not-cancelled" });
    } catch (error) {
      emit({ event: "cancelled", error: String(error) });
    }
    lines.close();
    emit(result(await call("hi")));
  }
} finally {
  await client.close();
}
