// An editor's side of ACP, written with the official SDK (`@agentclientprotocol/sdk`, installed
// by tests/install_acp_sdk.sh): starts `pi --mode acp`, runs one scenario and prints what it saw
// as one JSON object on stdout for tests/it/acp.rs to check. Every line pi-rs writes is also
// checked against the SDK's own zod schemas (the SDK validates only some of them itself):
// session/update notifications, permission requests, and each response against the schema of the
// method it answers. A message that fails its schema makes the script exit 1.
//
// Environment: ACP_SDK (the package folder), PI_RS_BIN, PI_ACP_SCENARIO, PI_ACP_ARGS (a JSON
// array of extra arguments), PI_ACP_CWD2 (a second project folder), PI_ACP_MCP (an McpServer for
// session/new), PI_ACP_ADAPTER (pi-acp's entry point: the agent is pi-acp over `pi --mode rpc`),
// PI_ACP_BUFFERS (the editor's unsaved buffers: an object, absolute path → text).
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import path from "node:path";
import fs from "node:fs";

const sdkDir = process.env.ACP_SDK;
const acp = await import(pathToFileURL(path.join(sdkDir, "dist/v1/stable/acp.js")).href);
const z = await import(pathToFileURL(path.join(sdkDir, "dist/v1/schema/zod.gen.js")).href);

const extraArgs = JSON.parse(process.env.PI_ACP_ARGS || "[]");
// PI_ACP_ADAPTER: pi-acp's entry point, run with this Node in front of `pi-rs --mode rpc` (its
// PI_ACP_PI_COMMAND) instead of pi-rs's own ACP.
const adapter = process.env.PI_ACP_ADAPTER;
const child = adapter
  ? spawn(process.execPath, [adapter], {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, PI_ACP_PI_COMMAND: process.env.PI_RS_BIN },
    })
  : spawn(process.env.PI_RS_BIN, ["--mode", "acp", ...extraArgs], {
      stdio: ["pipe", "pipe", "inherit"],
    });

// Which method each of our requests was, to check its response against that method's schema.
const responseSchemas = {
  initialize: z.zInitializeResponse,
  authenticate: z.zAuthenticateResponse,
  "session/new": z.zNewSessionResponse,
  "session/load": z.zLoadSessionResponse,
  "session/resume": z.zResumeSessionResponse,
  "session/list": z.zListSessionsResponse,
  "session/close": z.zCloseSessionResponse,
  "session/delete": z.zDeleteSessionResponse,
  "session/set_config_option": z.zSetSessionConfigOptionResponse,
  "session/prompt": z.zPromptResponse,
};
// The editor-side requests pi-rs may send (fs/*, terminal/*), checked against their schemas.
const clientMethodSchemas = {
  "fs/read_text_file": z.zReadTextFileRequest,
  "fs/write_text_file": z.zWriteTextFileRequest,
  "terminal/create": z.zCreateTerminalRequest,
  "terminal/output": z.zTerminalOutputRequest,
  "terminal/wait_for_exit": z.zWaitForTerminalExitRequest,
  "terminal/kill": z.zKillTerminalRequest,
  "terminal/release": z.zReleaseTerminalRequest,
};
const sentMethods = new Map();
// The last response pi-rs wrote, as written (the SDK turns some errors into successes).
let lastAnswer = null;
// Ids of our pending requests the agent withdrew ($/cancel_request).
const withdrawn = [];
const problems = [];
function check(schema, value, what) {
  const result = schema.safeParse(value);
  if (!result.success) problems.push(`${what}: ${JSON.stringify(value)}: ${result.error.message}`);
}

// Our requests pass through here on their way to pi-rs (to learn their methods).
const toAgent = new TransformStream({
  transform(chunk, controller) {
    for (const line of new TextDecoder().decode(chunk).split("\n")) {
      if (!line.trim()) continue;
      const message = JSON.parse(line);
      if (message.method && message.id !== undefined) sentMethods.set(message.id, message.method);
    }
    controller.enqueue(chunk);
  },
});
toAgent.readable.pipeTo(Writable.toWeb(child.stdin)).catch(() => {});

let pending = "";
const fromAgent = new TransformStream({
  transform(chunk, controller) {
    pending += new TextDecoder().decode(chunk);
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      let message;
      try {
        message = JSON.parse(line);
      } catch (e) {
        problems.push(`not JSON: ${line}`);
        continue;
      }
      if (message.jsonrpc !== "2.0") problems.push(`no jsonrpc 2.0: ${line}`);
      if (!message.method) lastAnswer = message;
      if (message.method === "session/update") check(z.zSessionNotification, message.params, "session/update");
      else if (message.method === "session/request_permission")
        check(z.zRequestPermissionRequest, message.params, "session/request_permission");
      else if (message.method === "elicitation/create")
        check(z.zCreateElicitationRequest, message.params, "elicitation/create");
      else if (clientMethodSchemas[message.method]) check(clientMethodSchemas[message.method], message.params, message.method);
      else if (message.method === "$/cancel_request") {
        check(z.zCancelRequestNotification, message.params, "$/cancel_request");
        withdrawn.push(message.params.requestId);
      } else if (message.method) problems.push(`unexpected method from the agent: ${line}`);
      else if (message.result !== undefined) {
        const method = sentMethods.get(message.id);
        if (responseSchemas[method]) check(responseSchemas[method], message.result, `${method} response`);
      }
    }
    controller.enqueue(chunk);
  },
});
Readable.toWeb(child.stdout).pipeTo(fromAgent.writable).catch(() => {});

const stream = acp.ndJsonStream(toAgent.writable, fromAgent.readable);

// What the client saw, per session.
const updates = {};
// Every update of the run, never reset.
const allUpdates = [];
const permissions = [];
let permissionAnswers = [];
let onUpdate = () => {};

const app = acp
  .client({ name: "pi-rs-test" })
  .onNotification("session/update", ({ params }) => {
    (updates[params.sessionId] ??= []).push(params.update);
    allUpdates.push(params.update);
    onUpdate(params);
  })
  .onRequest("session/request_permission", async ({ params, signal, agent }) => {
    permissions.push(params);
    const optionId = permissionAnswers.shift() ?? "reject_once";
    if (optionId === "cancel-the-turn") {
      // The user cancels the turn instead of answering; the agent withdraws the request.
      await agent.notify("session/cancel", { sessionId: params.sessionId });
      await new Promise((resolve) => {
        if (signal.aborted) return resolve();
        signal.addEventListener("abort", resolve);
        setTimeout(resolve, 10_000);
      });
      out.permissionAborted = signal.aborted;
      return { outcome: { outcome: "cancelled" } };
    }
    if (optionId === "cancelled") return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId } };
  });

// Text dialogs asked as forms: the answer is chosen by the form's message.
const elicitations = [];
const formAnswers = { "Your name?": "Ada", Edit: "edited text" };
app.onRequest("elicitation/create", ({ params }) => {
  elicitations.push(params);
  const value = formAnswers[params.message];
  return value === undefined ? { action: "decline" } : { action: "accept", content: { value } };
});

// The editor's files (PI_ACP_BUFFERS: path → unsaved text; others are read from disk) and
// terminals (real processes). Every fs/terminal request is logged in `editorLog`.
const buffers = new Map(Object.entries(JSON.parse(process.env.PI_ACP_BUFFERS || "{}")));
const editorLog = [];
const terminals = new Map();
let onTerminal = () => {};
let silentReads = false;
app
  .onRequest("fs/read_text_file", async ({ params, signal }) => {
    if (silentReads) {
      // Never answered: the agent gives up and withdraws the request.
      await new Promise((resolve) => {
        if (signal.aborted) return resolve();
        signal.addEventListener("abort", resolve);
        setTimeout(resolve, 20_000);
      });
      editorLog.push({ method: "fs/read_text_file", path: params.path, withdrawn: signal.aborted });
      throw acp.RequestError.requestCancelled();
    }
    editorLog.push({ method: "fs/read_text_file", path: params.path });
    if (buffers.has(params.path)) return { content: buffers.get(params.path) };
    if (!fs.existsSync(params.path)) throw acp.RequestError.resourceNotFound(params.path);
    return { content: fs.readFileSync(params.path, "utf8") };
  })
  .onRequest("fs/write_text_file", ({ params }) => {
    editorLog.push({ method: "fs/write_text_file", path: params.path, content: params.content });
    buffers.set(params.path, params.content);
    return {};
  })
  .onRequest("terminal/create", ({ params }) => {
    const id = `term-${terminals.size + 1}`;
    editorLog.push({ method: "terminal/create", terminalId: id, command: params.command, args: params.args, cwd: params.cwd, env: params.env });
    const env = { ...process.env };
    for (const { name, value } of params.env ?? []) env[name] = value;
    const proc = spawn(params.command, params.args ?? [], { cwd: params.cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    const terminal = { proc, output: "", exitStatus: null, released: false };
    terminal.exited = new Promise((resolve) =>
      proc.on("exit", (exitCode, signal) => {
        terminal.exitStatus = { exitCode, signal };
        resolve(terminal.exitStatus);
      }),
    );
    const take = (chunk) => {
      terminal.output += chunk.toString();
      const limit = params.outputByteLimit;
      if (limit && terminal.output.length > limit) terminal.output = terminal.output.slice(-limit);
    };
    proc.stdout.on("data", take);
    proc.stderr.on("data", take);
    terminals.set(id, terminal);
    onTerminal(params.sessionId, id);
    return { terminalId: id };
  })
  .onRequest("terminal/output", ({ params }) => {
    const terminal = terminals.get(params.terminalId);
    editorLog.push({ method: "terminal/output", terminalId: params.terminalId });
    return { output: terminal.output, truncated: false, exitStatus: terminal.exitStatus };
  })
  .onRequest("terminal/wait_for_exit", async ({ params }) => {
    editorLog.push({ method: "terminal/wait_for_exit", terminalId: params.terminalId });
    return await terminals.get(params.terminalId).exited;
  })
  .onRequest("terminal/kill", ({ params }) => {
    editorLog.push({ method: "terminal/kill", terminalId: params.terminalId });
    terminals.get(params.terminalId).proc.kill("SIGKILL");
    return {};
  })
  .onRequest("terminal/release", ({ params }) => {
    editorLog.push({ method: "terminal/release", terminalId: params.terminalId });
    const terminal = terminals.get(params.terminalId);
    terminal.released = true;
    if (terminal.exitStatus === null) terminal.proc.kill("SIGKILL");
    return {};
  });

const cwd = process.cwd();
const out = {};

async function errorOf(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return { code: e.code, message: e.message };
  }
}

function text(sessionId, kind = "agent_message_chunk") {
  return (updates[sessionId] ?? [])
    .filter((u) => u.sessionUpdate === kind && u.content.type === "text")
    .map((u) => u.content.text)
    .join("");
}

const scenarios = {
  // initialize, a session, a turn with a tool call, a prompt with image and resources, a change
  // of thinking level, and a provider error.
  async turn(ctx) {
    out.init = await ctx.request("initialize", {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "pi-rs-test", version: "1" },
    });
    out.authenticate = await ctx.request("authenticate", { methodId: "pi-login" });
    const session = await ctx.request("session/new", { cwd, mcpServers: [] });
    out.session = session;
    const id = session.sessionId;
    out.first = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "run it" }] });
    out.firstText = text(id);
    out.firstUpdates = [...updates[id]];
    updates[id] = [];
    out.second = await ctx.request("session/prompt", {
      sessionId: id,
      prompt: [
        { type: "text", text: "look at these" },
        { type: "image", data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", mimeType: "image/png" },
        { type: "resource_link", uri: "file:///tmp/linked.txt", name: "linked.txt" },
        { type: "resource", resource: { uri: "file:///tmp/embedded.txt", text: "embedded body", mimeType: "text/plain" } },
      ],
    });
    out.secondText = text(id);
    out.setLevel = await ctx.request("session/set_config_option", { sessionId: id, configId: "thought_level", value: "high" });
    out.badLevel = await errorOf(ctx.request("session/set_config_option", { sessionId: id, configId: "thought_level", value: "loud" }));
    out.providerError = await errorOf(ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "fail" }] }));
    out.unknownSession = await errorOf(ctx.request("session/prompt", { sessionId: "nope", prompt: [{ type: "text", text: "x" }] }));
    out.commandsPrompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "/fix the bug" }] });
    out.allUpdates = allUpdates;
  },

  // Two sessions in two folders prompted at once: each sees one whole reply of its own.
  async two(ctx) {
    await ctx.request("initialize", { protocolVersion: 1 });
    const a = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
    const b = (await ctx.request("session/new", { cwd: process.env.PI_ACP_CWD2, mcpServers: [] })).sessionId;
    const [ra, rb] = await Promise.all([
      ctx.request("session/prompt", { sessionId: a, prompt: [{ type: "text", text: "from A" }] }),
      ctx.request("session/prompt", { sessionId: b, prompt: [{ type: "text", text: "from B" }] }),
    ]);
    out.sessions = { a, b };
    out.stops = [ra.stopReason, rb.stopReason];
    out.texts = { a: text(a), b: text(b) };
    out.kinds = { a: updates[a].map((u) => u.sessionUpdate), b: updates[b].map((u) => u.sessionUpdate) };
  },

  // A prompt whose tool blocks is cancelled once the tool runs.
  async cancel(ctx) {
    await ctx.request("initialize", { protocolVersion: 1 });
    const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
    let cancelled = false;
    onUpdate = (params) => {
      if (!cancelled && params.update.sessionUpdate === "tool_call_update" && params.update.status === "in_progress") {
        cancelled = true;
        ctx.notify("session/cancel", { sessionId: id });
      }
    };
    out.cancelled = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "block" }] });
    onUpdate = () => {};
    out.after = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "again" }] });
    out.afterText = text(id);
  },

  // The approval gate asks: allow always (remembered: the second call is not asked), then, in
  // another session, reject.
  async permission(ctx) {
    await ctx.request("initialize", { protocolVersion: 1 });
    const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
    permissionAnswers = ["allow_always", "reject_once"];
    out.first = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "twice" }] });
    out.askedAfterFirst = permissions.length;
    // "Always" holds for that session only: a new session asks again.
    const other = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
    out.second = await ctx.request("session/prompt", { sessionId: other, prompt: [{ type: "text", text: "other" }] });
    out.permissions = permissions;
    out.toolUpdates = [...updates[id], ...updates[other]].filter((u) => u.sessionUpdate === "tool_call_update" && u.status);
  },

  // A session with a turn is closed, listed, loaded (its history replayed) and prompted again;
  // closed again and resumed (nothing replayed).
  async load(ctx) {
    out.init = await ctx.request("initialize", { protocolVersion: 1 });
    const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
    await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "write it" }] });
    out.live = updates[id];
    updates[id] = [];
    out.close = await ctx.request("session/close", { sessionId: id });
    out.closedPrompt = await errorOf(ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "x" }] }));
    out.list = await ctx.request("session/list", { cwd });
    out.load = await ctx.request("session/load", { sessionId: id, cwd, mcpServers: [] });
    out.replay = updates[id];
    updates[id] = [];
    out.again = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "and again" }] });
    out.againText = text(id);
    out.missing = await errorOf(ctx.request("session/load", { sessionId: "00000000-no-such", cwd, mcpServers: [] }));
    out.prefix = await errorOf(ctx.request("session/load", { sessionId: id.slice(0, 8), cwd, mcpServers: [] }));
    out.pathLike = await errorOf(ctx.request("session/resume", { sessionId: "../notes.jsonl", cwd, mcpServers: [] }));
    out.loadOpen = await errorOf(ctx.request("session/load", { sessionId: id, cwd, mcpServers: [] }));
    await ctx.request("session/close", { sessionId: id });
    updates[id] = [];
    out.resume = await ctx.request("session/resume", { sessionId: id, cwd, mcpServers: [] });
    out.resumeReplayed = updates[id].filter((u) => u.sessionUpdate.endsWith("message_chunk")).length;
    out.sessionId = id;
  },
};

// The client's MCP server (PI_ACP_MCP, one McpServer) is used by the model in a turn.
scenarios.mcp = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1 });
  const server = JSON.parse(process.env.PI_ACP_MCP);
  const id = (await ctx.request("session/new", { cwd, mcpServers: [server] })).sessionId;
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "echo" }] });
  out.updates = updates[id];
  out.badServer = await errorOf(ctx.request("session/new", { cwd, mcpServers: [{ type: "sse", name: "x", url: "http://127.0.0.1:1/", headers: [] }] }));
};

// A client that shows notices and compactions: a threshold compaction after the second prompt,
// a retried request in the third.
scenarios.state = async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { session: { notices: {}, compaction: {} } },
  });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.stops = [];
  for (const text of ["first", "second", "third"]) {
    const response = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text }] });
    out.stops.push(response.stopReason);
  }
  out.allUpdates = [...allUpdates];
  // Loaded again: the replay starts from the compaction's summary.
  await ctx.request("session/close", { sessionId: id });
  updates[id] = [];
  await ctx.request("session/load", { sessionId: id, cwd, mcpServers: [] });
  out.replay = updates[id];
};

// An editor that reads, writes and runs for the tools: four prompts (read, edit, write, bash),
// then a prompt whose command is cancelled while it runs in the editor's terminal.
scenarios.editor = async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.stops = [];
  for (const text of ["read it", "edit it", "write it", "run it"]) {
    const response = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text }] });
    out.stops.push(response.stopReason);
  }
  onTerminal = (sessionId) => setTimeout(() => ctx.notify("session/cancel", { sessionId }), 300);
  out.cancelled = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "block" }] });
  // The terminal/release after the cancel's last update may still be on its way.
  for (let i = 0; i < 100 && !editorLog.some((e) => e.method === "terminal/release" && e.terminalId === "term-2"); i++)
    await new Promise((resolve) => setTimeout(resolve, 100));
  // A killed process's exit is reported by Node a moment after the kill: wait for it (bounded).
  const settled = [...terminals.values()].map((t) => t.exited);
  await Promise.race([Promise.all(settled), new Promise((resolve) => setTimeout(resolve, 10000))]);
  out.updates = updates[id];
  out.editorLog = editorLog;
  out.buffers = Object.fromEntries(buffers);
  out.terminals = [...terminals].map(([id, t]) => ({ id, released: t.released, exitStatus: t.exitStatus }));
};

// A bash call with a 3 s timeout runs in the editor's terminal and outlives it: the agent kills
// the terminal; the turn goes on.
scenarios.terminalTimeout = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: { terminal: true } });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "slow" }] });
  for (let i = 0; i < 100 && !editorLog.some((e) => e.method === "terminal/release"); i++)
    await new Promise((resolve) => setTimeout(resolve, 100));
  const settled = [...terminals.values()].map((t) => t.exited);
  await Promise.race([Promise.all(settled), new Promise((resolve) => setTimeout(resolve, 10000))]);
  out.updates = updates[id];
  out.text = text(id);
  out.editorLog = editorLog.map((e) => e.method);
  out.terminals = [...terminals].map(([id, t]) => ({ id, released: t.released, exitStatus: t.exitStatus }));
};

// A prompt while one runs steers it: A's tool waits for a file; B is sent meanwhile; once the
// agent has B queued (a config change after it is answered only after the agent handled B),
// the file lets the tool end. A is answered when B is taken into the run, B when the run ends.
scenarios.steer = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1 });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  const order = [];
  const ra = ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "start" }] });
  ra.then(() => order.push("a"));
  await updateOf(id, (u) => u.sessionUpdate === "tool_call_update" && u.status === "in_progress");
  const rb = ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "also check the tests" }] });
  rb.then(() => order.push("b"));
  await ctx.request("session/set_config_option", { sessionId: id, configId: "thought_level", value: "low" });
  fs.writeFileSync(path.join(cwd, "go"), "");
  out.a = await ra;
  out.b = await rb;
  out.order = order;
  out.text = text(id);
};

// An editor that never answers fs/read_text_file (the agent's deadline is short in the test).
scenarios.silentEditor = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: true } } });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  silentReads = true;
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "read it" }] });
  for (let i = 0; i < 100 && editorLog.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 100));
  out.editorLog = editorLog;
  out.withdrawn = withdrawn;
};

// An editor that offers fs and terminal to a sandboxed pi-rs: two prompts (write, bash).
scenarios.sandboxedEditor = async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.stops = [];
  for (const text of ["write it", "run it"]) {
    const response = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text }] });
    out.stops.push(response.stopReason);
  }
  out.editorLog = editorLog;
};

// An extension command changes the model (PI_ACP_PROMPT: the prompt's text).
scenarios.modelChange = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1 });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: process.env.PI_ACP_PROMPT }] });
  // The update is sent once the prompt's answer is out.
  for (let i = 0; i < 100 && !updates[id].some((u) => u.sessionUpdate === "config_option_update"); i++)
    await new Promise((resolve) => setTimeout(resolve, 100));
  out.updates = updates[id];
};

// The smallest editor session: a turn with a tool call (for the pi-acp route too).
scenarios.route = async (ctx) => {
  out.init = await ctx.request("initialize", { protocolVersion: 1 });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "run it" }] });
  out.text = text(id);
  out.kinds = updates[id].map((u) => u.sessionUpdate);
};

// A turn cancelled while a permission request is open: the request is withdrawn.
scenarios.cancelAsk = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1 });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  permissionAnswers = ["cancel-the-turn"];
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "ask" }] });
  out.withdrawn = withdrawn;
  out.permissions = permissions.length;
};

// An extension command with a select, an input and an editor dialog, then a notify.
scenarios.dialogs = async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { elicitation: { form: {} }, session: { notices: {} } },
  });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  permissionAnswers = ["1"];
  out.prompt = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "/ui" }] });
  out.permissions = permissions;
  out.elicitations = elicitations;
  out.notices = allUpdates.filter((u) => u.sessionUpdate === "notice");
};

// Resolves with the first update of `sessionId` that `test` accepts (seen or still to come).
function updateOf(sessionId, test) {
  const seen = (updates[sessionId] ?? []).find(test);
  if (seen) return Promise.resolve(seen);
  return new Promise((resolve) => {
    const previous = onUpdate;
    onUpdate = (params) => {
      previous(params);
      if (params.sessionId === sessionId && test(params.update)) {
        onUpdate = previous;
        resolve(params.update);
      }
    };
  });
}

// Two sessions stream at once (A's reply stalls, B's is held by the fake); A is cancelled while
// B's stream is open, B then finishes (the test releases it once A's connection closed), and A
// prompts again.
scenarios.pool = async (ctx) => {
  await ctx.request("initialize", { protocolVersion: 1 });
  const a = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  const b = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  const chunk = (u) => u.sessionUpdate === "agent_message_chunk";
  const ra = ctx.request("session/prompt", { sessionId: a, prompt: [{ type: "text", text: "stall" }] });
  await updateOf(a, chunk);
  const rb = ctx.request("session/prompt", { sessionId: b, prompt: [{ type: "text", text: "hold" }] });
  await updateOf(b, chunk);
  await ctx.notify("session/cancel", { sessionId: a });
  out.a = await ra;
  out.b = await rb;
  out.bText = text(b);
  updates[a] = [];
  out.again = await ctx.request("session/prompt", { sessionId: a, prompt: [{ type: "text", text: "again" }] });
  out.againText = text(a);
};

// A session with a turn: deleting it while open is refused; closed, it is listed, deleted, and
// gone from the list; deleting it again finds nothing (-32002).
scenarios.delete = async (ctx) => {
  out.init = await ctx.request("initialize", { protocolVersion: 1 });
  const id = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  out.id = id;
  await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "keep me" }] });
  out.whileOpen = await errorOf(ctx.request("session/delete", { sessionId: id }));
  await ctx.request("session/close", { sessionId: id });
  out.before = (await ctx.request("session/list", { cwd })).sessions.map((s) => s.sessionId);
  out.deleted = await ctx.request("session/delete", { sessionId: id });
  out.after = (await ctx.request("session/list", { cwd })).sessions.map((s) => s.sessionId);
  // The SDK takes -32002 (no such session) to session/delete as success, as ACP recommends.
  out.again = await errorOf(ctx.request("session/delete", { sessionId: id }));
  out.againWritten = lastAnswer;
};

const scenario = scenarios[process.env.PI_ACP_SCENARIO];
if (!scenario) throw new Error(`unknown scenario ${process.env.PI_ACP_SCENARIO}`);
const timer = setTimeout(() => {
  console.error("the scenario did not finish within 60 s");
  process.exit(2);
}, 60_000);
try {
  await app.connectWith(stream, scenario);
} finally {
  clearTimeout(timer);
}
child.stdin.end();
const code = await new Promise((resolve) => child.on("exit", (c, s) => resolve(c ?? s)));
out.exitCode = code;
out.problems = problems;
console.log(JSON.stringify(out));
process.exit(problems.length ? 1 : 0);
