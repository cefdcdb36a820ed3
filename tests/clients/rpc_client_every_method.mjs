// Drives pi-rs with a reference pi's own RpcClient (the class a TypeScript integration imports),
// calling every public method the client has, and checks what each answers. Run by
// tests/it/reference_clients.rs against the fake provider, whose script matches the turns below:
//
//   1. "Run a tool"      bash tool call (echo tool-output), then the text "Tool said tool-output."
//   2. "Queue things"    a bash call that waits for the file gate-1; meanwhile steer/followUp (and
//                        clearQueue where the client has it); then "Steered." and "Followed up."
//   3. "Abort me"        a bash call waiting for gate-2, which never comes: abort
//   4. compact           the summary replies
//
// Environment: PI_CLIENT_MODULE (the package's dist/modes/rpc/rpc-client.js), PI_RS_BIN (what
// exec_pi_rs.mjs runs), PI_CLIENT_PROVIDER / PI_CLIENT_MODEL, PI_CLIENT_ARGS (JSON array of extra
// arguments, e.g. ["--rpc-profile","legacy"]), PI_CLIENT_PROFILE ("default" or "legacy": which
// wire facts to expect). The working directory is the workspace's. Exit 0 when every check held.
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const { RpcClient } = await import(pathToFileURL(process.env.PI_CLIENT_MODULE).href);
const profile = process.env.PI_CLIENT_PROFILE ?? "default";
const legacy = profile === "legacy";
const cwd = process.cwd();

// Internal plumbing of the class, not API.
const INTERNAL = new Set([
  "constructor",
  "handleLine",
  "send",
  "getData",
  "createProcessExitError",
  "rejectPendingRequests",
]);
const publicMethods = Object.getOwnPropertyNames(RpcClient.prototype).filter(
  (name) => !INTERNAL.has(name) && typeof RpcClient.prototype[name] === "function",
);
const called = new Set();
for (const name of publicMethods) {
  const original = RpcClient.prototype[name];
  RpcClient.prototype[name] = function (...args) {
    called.add(name);
    return original.apply(this, args);
  };
}
const has = (name) => publicMethods.includes(name);

function check(condition, message, detail) {
  if (!condition) {
    const shown = detail === undefined ? "" : `: ${JSON.stringify(detail)?.slice(0, 2000)}`;
    throw new Error(`${message}${shown}`);
  }
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const client = new RpcClient({
  cliPath: join(import.meta.dirname, "exec_pi_rs.mjs"),
  cwd,
  provider: process.env.PI_CLIENT_PROVIDER,
  model: process.env.PI_CLIENT_MODEL,
  args: JSON.parse(process.env.PI_CLIENT_ARGS ?? "[]"),
});
const events = [];
client.onEvent((event) => events.push(event));
/** Resolves with the first event (from now on) that satisfies `predicate`. */
function nextEvent(predicate, timeout = 20000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`no matching event within ${timeout} ms; stderr: ${client.getStderr()}`));
    }, timeout);
    const stop = client.onEvent((event) => {
      if (predicate(event)) {
        clearTimeout(timer);
        stop();
        resolve(event);
      }
    });
  });
}
const textOf = (message) =>
  typeof message?.content === "string"
    ? message.content
    : (message?.content ?? [])
        .filter((block) => block.type === "text")
        .map((block) => block.text)
        .join("");

async function run() {
  await client.start();

  // ---- state and catalog ------------------------------------------------------------------
  const state = await client.getState();
  check(state.model?.id === process.env.PI_CLIENT_MODEL, "getState names the model", state);
  check(state.isStreaming === false, "idle at start", state);
  check(typeof state.sessionFile === "string", "a session file", state);
  const models = await client.getAvailableModels();
  check(Array.isArray(models) && models.length >= 2, "getAvailableModels lists models", models);
  const commands = await client.getCommands();
  check(Array.isArray(commands), "getCommands answers a list", commands);
  check(typeof client.getStderr() === "string", "getStderr answers text");

  // ---- 1. a turn with a tool call ------------------------------------------------------------
  const turn = await client.promptAndWait("Run a tool");
  const toolEnd = turn.find((e) => e.type === "tool_execution_end");
  check(toolEnd?.toolName === "bash", "the bash tool ran", toolEnd);
  check(textOf(toolEnd.result).includes("tool-output"), "its output came back", toolEnd);
  const updates = turn.filter((e) => e.type === "message_update");
  check(updates.length > 0, "streamed updates");
  if (legacy) {
    // Clients of pi <= 0.83 read the cumulative message from every update.
    check(
      updates.every((e) => e.message && e.assistantMessageEvent?.partial),
      "legacy updates carry message and partial",
      updates[0],
    );
    check(!events.some((e) => e.type === "agent_settled"), "no agent_settled in legacy");
  } else {
    check(
      updates.every((e) => e.message === undefined && e.assistantMessageEvent?.partial === undefined),
      "default updates carry only the delta",
      updates[0],
    );
    check(turn.at(-1).type === "agent_settled", "collectEvents ends at agent_settled");
  }
  check((await client.getLastAssistantText()) === "Tool said tool-output.", "last assistant text");
  // pi 1.6.0 also lists its system prompt as a "system" message; the conversation is the rest.
  const messages = (await client.getMessages()).filter((m) => m.role !== "system");
  check(
    JSON.stringify(messages.map((m) => m.role)) ===
      JSON.stringify(["user", "assistant", "toolResult", "assistant"]),
    "getMessages holds the turn",
    messages.map((m) => m.role),
  );
  const stats = await client.getSessionStats();
  check(stats.userMessages === 1 && stats.toolCalls === 1, "getSessionStats counts", stats);
  if (has("getEntries")) {
    const entries = await client.getEntries();
    check(Array.isArray(entries.entries) && entries.entries.length >= 4, "getEntries", entries);
    const later = await client.getEntries(entries.entries.at(-1).id);
    check(later.entries.length === 0, "getEntries since the last id is empty", later);
  }
  if (has("getTree")) {
    const tree = await client.getTree();
    check(Array.isArray(tree.tree) && tree.tree.length === 1, "getTree has one root", tree);
  }

  // ---- 2. steering, follow-up, clearing the queue --------------------------------------------
  const toolStarted = nextEvent((e) => e.type === "tool_execution_start");
  const idleAfterQueue = client.waitForIdle();
  const disposition = await client.prompt("Queue things");
  if (!legacy) check(disposition === "started", "prompt disposition", disposition);
  await toolStarted;
  if (has("clearQueue")) {
    await client.steer("Dropped steer");
    await client.followUp("Dropped follow-up");
    const cleared = await client.clearQueue();
    check(
      JSON.stringify(cleared) ===
        JSON.stringify({ steering: ["Dropped steer"], followUp: ["Dropped follow-up"] }),
      "clearQueue answers the removed texts",
      cleared,
    );
  }
  const steered = await client.steer("Steer now");
  const followed = await client.followUp("Follow up later");
  if (!legacy) {
    check(steered === "queued" && followed === "queued", "queued dispositions", [steered, followed]);
  }
  check((await client.getState()).pendingMessageCount === 2, "two messages pending");
  writeFileSync(join(cwd, "gate-1"), "");
  await idleAfterQueue;
  const afterQueue = (await client.getMessages()).filter((m) => m.role === "user").map(textOf);
  check(
    JSON.stringify(afterQueue.slice(-3)) ===
      JSON.stringify(["Queue things", "Steer now", "Follow up later"]),
    "the queued messages were delivered, the cleared ones not",
    afterQueue,
  );

  // ---- 3. abort --------------------------------------------------------------------------------
  const abortTool = nextEvent((e) => e.type === "tool_execution_start");
  const idleAfterAbort = client.waitForIdle();
  await client.prompt("Abort me");
  await abortTool;
  await client.abort();
  await idleAfterAbort;
  // The running tool is killed and reports it. (pi then also records an empty "aborted"
  // assistant reply from the LLM call it starts and cancels at once; pi-rs makes no such call.)
  const killed = (await client.getMessages()).find(
    (m) => m.role === "toolResult" && m.toolCallId === "toolu_03",
  );
  check(killed?.isError && textOf(killed).includes("Command aborted"), "the tool was aborted", killed);
  check(!(await client.getState()).isStreaming, "idle after abort");

  // ---- RPC bash ----------------------------------------------------------------------------------
  const direct = await client.bash("echo direct");
  check(direct.output === "direct\n" && direct.exitCode === 0, "bash answers", direct);
  // Default profile: abort once the command provably runs (its first output streamed); legacy
  // streams nothing, and pi-rs handles abort_bash after the bash before it anyway.
  const running = legacy ? null : nextEvent((e) => e.type === "bash_execution_update");
  const slow = client.bash("echo started; sleep 30");
  await running;
  await client.abortBash();
  const cancelled = await slow;
  check(cancelled.cancelled === true, "abortBash cancels", cancelled);

  // ---- model and thinking ----------------------------------------------------------------------
  const plain = models.find((m) => m.id !== process.env.PI_CLIENT_MODEL);
  const setTo = await client.setModel(plain.provider, plain.id);
  check(setTo.id === plain.id, "setModel answers the model", setTo);
  const cycled = await client.cycleModel();
  check(cycled === null || typeof cycled.model?.id === "string", "cycleModel", cycled);
  await client.setModel(state.model.provider, state.model.id);
  await client.setThinkingLevel("low");
  check((await client.getState()).thinkingLevel === "low", "setThinkingLevel");
  const nextLevel = await client.cycleThinkingLevel();
  check(nextLevel?.level === "medium", "cycleThinkingLevel", nextLevel);
  if (has("getAvailableThinkingLevels")) {
    const levels = await client.getAvailableThinkingLevels();
    check(levels.includes("off") && levels.includes("high"), "thinking levels", levels);
  }

  // ---- modes and switches ------------------------------------------------------------------------
  await client.setSteeringMode("all");
  await client.setFollowUpMode("all");
  await client.setAutoCompaction(false);
  await client.setAutoRetry(false);
  await client.abortRetry();
  const modes = await client.getState();
  check(
    modes.steeringMode === "all" && modes.followUpMode === "all" && modes.autoCompactionEnabled === false,
    "modes set",
    modes,
  );

  // ---- 4. compaction -----------------------------------------------------------------------------
  const compacted = await client.compact("Keep the tool output");
  check(typeof compacted.summary === "string" && compacted.summary.length > 0, "compact", compacted);

  // ---- session commands ----------------------------------------------------------------------------
  const exported = await client.exportHtml(join(cwd, "session.html"));
  check(existsSync(exported.path), "exportHtml wrote the file", exported);
  await client.setSessionName("client test");
  const named = await client.getState();
  check(named.sessionName === "client test", "setSessionName", named);
  const original = named.sessionFile;
  const forkable = await client.getForkMessages();
  check(forkable.some((m) => m.text === "Run a tool"), "getForkMessages", forkable);
  const cloned = await client.clone();
  check(cloned.cancelled === false, "clone", cloned);
  check((await client.getState()).sessionFile !== original, "clone made a new session");
  const forked = await client.fork(forkable.find((m) => m.text === "Run a tool").entryId);
  check(forked.text === "Run a tool" && forked.cancelled === false, "fork", forked);
  const fresh = await client.newSession();
  check(fresh.cancelled === false, "newSession", fresh);
  check(
    (await client.getMessages()).every((m) => m.role === "system"),
    "a new session has no conversation",
  );
  const back = await client.switchSession(original);
  check(back.cancelled === false, "switchSession", back);
  check((await client.getState()).sessionName === "client test", "switched back");

  await client.stop();
  const missing = publicMethods.filter((name) => !called.has(name));
  check(missing.length === 0, "every public RpcClient method was exercised", missing);
  console.log(`ok: ${publicMethods.length} RpcClient methods in the ${profile} profile`);
}

try {
  await run();
} catch (error) {
  console.error(`FAILED: ${error.stack ?? error}`);
  await client.stop().catch(() => {});
  process.exit(1);
}
