// Drives `dsh acp` with the TypeScript ACP SDK (@agentclientprotocol/sdk, the reference client):
// initialize, session/new, streamed prompts, a tool call, session/cancel and $/cancel_request
// (the SDK sends it when a request's cancellationSignal aborts), then a prompt after the cancels.
//
// Usage: node acp_sdk_client.mjs SDK_DIR CWD -- COMMAND [ARG...]
//   SDK_DIR  the installed package (tools/install-acp-sdk.sh prints it)
//   CWD      the session's cwd, and the agent's working directory
//
// The scenario is the one of acp_sdk_client.py (the Python SDK); test_acp_sdk_clients.py runs both
// against the same preset. Prints one JSON line on stdout: the SDK's version, the initialize and
// session/new results, each turn (its prompt, stop reason, the updates the SDK delivered, parsed by
// its own zod schemas, and the raw session/update messages on the wire) and the agent's exit code.
// Any failure prints its message on stderr and exits 1.
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, cwd, separator, ...command] = process.argv.slice(2);
if (!sdkDir || !cwd || separator !== "--" || command.length === 0) {
  console.error("usage: node acp_sdk_client.mjs SDK_DIR CWD -- COMMAND [ARG...]");
  process.exit(2);
}
const WAIT_MS = 60_000;

const pkg = JSON.parse(await readFile(join(sdkDir, "package.json"), "utf8"));
const acp = await import(pathToFileURL(join(sdkDir, pkg.exports["."].import)).href);

const agent = spawn(command[0], command.slice(1), { cwd, stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) =>
  agent.on("exit", (code, signal) => resolve(code ?? signal)),
);

const delivered = []; // updates as the SDK hands them to the client (validated by its schemas)
const raw = []; // session/update params as they came over the wire
const permissions = [];
let waiters = [];

function deliver(update) {
  delivered.push(update);
  waiters = waiters.filter((waiter) => !waiter());
}

/** Resolves once an update from index `from` on satisfies `test`. */
function waitForUpdate(from, test, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
    const check = () => {
      if (!delivered.slice(from).some(test)) return false;
      clearTimeout(timer);
      resolve();
      return true;
    };
    if (!check()) waiters.push(check);
  });
}

const base = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const recording = new TransformStream({
  transform(message, controller) {
    if (message.method === "session/update") raw.push(message.params);
    controller.enqueue(message);
  },
});
const stream = { writable: base.writable, readable: base.readable.pipeThrough(recording) };

const toolDone = (update) =>
  update.sessionUpdate === "tool_call_update" && update.status === "completed";

async function run() {
  return acp
    .client({ name: "dsh-acp-sdk-test" })
    .onNotification("session/update", ({ params }) => deliver(params.update))
    .onRequest("session/request_permission", ({ params }) => {
      permissions.push(params.toolCall.toolCallId);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .connectWith(stream, async (ctx) => {
      const initialize = await ctx.request("initialize", {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {},
        clientInfo: { name: "acp-sdk-client.mjs", version: pkg.version },
      });
      const session = await ctx.request("session/new", { cwd, mcpServers: [] });
      const sessionId = session.sessionId;
      const turns = [];

      async function turn(text, cancel) {
        const from = delivered.length;
        const rawFrom = raw.length;
        const controller = new AbortController();
        const answer = ctx.request(
          "session/prompt",
          { sessionId, prompt: [{ type: "text", text }] },
          { cancellationSignal: controller.signal },
        );
        if (cancel) {
          // the turn is running once its echo call is done (the model then hangs)
          await waitForUpdate(from, toolDone, `the echo call of "${text}"`);
          if (cancel === "session/cancel") await ctx.notify("session/cancel", { sessionId });
          else controller.abort();
        }
        const response = await answer;
        turns.push({
          prompt: text,
          cancel: cancel ?? null,
          stopReason: response.stopReason,
          updates: delivered.slice(from),
          raw: raw.slice(rawFrom),
        });
      }

      await turn("hi there");
      await turn("please use the tool");
      await turn("please hang", "session/cancel");
      await turn("please hang", "$/cancel_request");
      await turn("still there?");
      return { initialize, session, turns };
    });
}

let result;
try {
  result = await run();
} catch (error) {
  console.error(`acp_sdk_client.mjs: ${error?.stack ?? error}`);
  agent.kill("SIGKILL");
  await exited;
  process.exit(1);
}
agent.stdin.end();
const timer = setTimeout(() => agent.kill("SIGKILL"), 15_000);
const exitCode = await exited;
clearTimeout(timer);
console.log(
  JSON.stringify({ sdk: `${pkg.name}@${pkg.version}`, ...result, permissions, exitCode }),
);
