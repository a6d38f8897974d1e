// Drives `dsh acp --workspace client` with the TypeScript ACP SDK (@agentclientprotocol/sdk, the
// reference client) offering fs and terminal: files live in memory here, the terminal is fake, every
// permission is allowed. One prompt ("go"); the agent's model decides what to do.
//
// Usage: node acp_sdk_fs_client.mjs SDK_DIR CWD -- COMMAND [ARG...]
//
// Prints one JSON line on stdout: the SDK's version, the stop reason, the client requests the agent
// sent (method and params, in order), the files as they ended up, and the agent's exit code.
// Any failure prints its message on stderr and exits 1.
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, cwd, separator, ...command] = process.argv.slice(2);
if (!sdkDir || !cwd || separator !== "--" || command.length === 0) {
  console.error("usage: node acp_sdk_fs_client.mjs SDK_DIR CWD -- COMMAND [ARG...]");
  process.exit(2);
}

const pkg = JSON.parse(await readFile(join(sdkDir, "package.json"), "utf8"));
const acp = await import(pathToFileURL(join(sdkDir, pkg.exports["."].import)).href);

const agent = spawn(command[0], command.slice(1), { cwd, stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) =>
  agent.on("exit", (code, signal) => resolve(code ?? signal)),
);
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const files = {};
const requests = [];
const record = (method) => ({ params }) => {
  const { sessionId: _ignored, ...rest } = params;
  requests.push({ method, params: rest });
};

async function run() {
  return acp
    .client({ name: "dsh-acp-sdk-fs-test" })
    .onNotification("session/update", () => {})
    .onRequest("session/request_permission", (request) => {
      record("session/request_permission")({ params: { title: request.params.toolCall.title } });
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .onRequest("fs/write_text_file", (request) => {
      record("fs/write_text_file")(request);
      files[request.params.path] = request.params.content;
      return {};
    })
    .onRequest("fs/read_text_file", (request) => {
      record("fs/read_text_file")(request);
      return { content: files[request.params.path] ?? "" };
    })
    .onRequest("terminal/create", (request) => {
      record("terminal/create")(request);
      return { terminalId: "term-1" };
    })
    .onRequest("terminal/wait_for_exit", (request) => {
      record("terminal/wait_for_exit")(request);
      return { exitCode: 0 };
    })
    .onRequest("terminal/output", (request) => {
      record("terminal/output")(request);
      return { output: "ran in the editor\n", truncated: false, exitStatus: { exitCode: 0 } };
    })
    .onRequest("terminal/release", (request) => {
      record("terminal/release")(request);
      return {};
    })
    .connectWith(stream, async (ctx) => {
      await ctx.request("initialize", {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
        clientInfo: { name: "acp_sdk_fs_client.mjs", version: pkg.version },
      });
      const session = await ctx.request("session/new", { cwd, mcpServers: [] });
      const answer = await ctx.request("session/prompt", {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: "go" }],
      });
      return { stopReason: answer.stopReason };
    });
}

let result;
try {
  result = await run();
} catch (error) {
  console.error(`acp_sdk_fs_client.mjs: ${error?.stack ?? error}`);
  agent.kill("SIGKILL");
  await exited;
  process.exit(1);
}
agent.stdin.end();
const timer = setTimeout(() => agent.kill("SIGKILL"), 15_000);
const exitCode = await exited;
clearTimeout(timer);
console.log(JSON.stringify({ sdk: `${pkg.name}@${pkg.version}`, ...result, requests, files, exitCode }));
