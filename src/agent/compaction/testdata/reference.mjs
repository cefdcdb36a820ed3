// Regenerates fixtures.json and expected.json for the compaction tests by running the
// reference's own functions (pi 0.73.1) on the same inputs the Rust tests read.
//   node src/agent/compaction/testdata/reference.mjs
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = `${process.env.HOME}/.cache/pi-reference-0.73.1/node_modules/@mariozechner/pi-coding-agent/dist/core`;
const { serializeConversation, computeFileLists, formatFileOperations, createFileOps } = await import(`${pkg}/compaction/utils.js`);
const { estimateTokens, estimateContextTokens, prepareCompaction } = await import(`${pkg}/compaction/compaction.js`);
const { convertToLlm } = await import(`${pkg}/messages.js`);
const here = dirname(fileURLToPath(import.meta.url));

const usage = (input, output, cost = 0) => ({
  input, output, cacheRead: 0, cacheWrite: 0, totalTokens: input + output,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: cost },
});
let clock = 1000;
const u = (text) => ({ role: "user", content: [{ type: "text", text }], timestamp: clock++ });
const a = (content, stopReason = "stop", use = usage(0, 0)) => ({
  role: "assistant", content, api: "openai-completions", provider: "p", model: "m",
  usage: use, stopReason, timestamp: clock++,
});
const t = (text) => ({ type: "text", text });
const call = (id, name, args) => ({ type: "toolCall", id, name, arguments: args });
const r = (id, name, text) => ({ role: "toolResult", toolCallId: id, toolName: name, content: [t(text)], isError: false, timestamp: clock++ });
const long = (n, seed = "abcdefghij") => seed.repeat(Math.ceil(n / seed.length)).slice(0, n);

// ---- messages for serialization and estimates ----
const messages = [
  u("Please fix the parser."),
  { role: "user", content: "plain string content", timestamp: clock++ },
  { role: "user", content: [t("look at "), { type: "image", data: "AAAA", mimeType: "image/png" }, t("this")], timestamp: clock++ },
  { role: "user", content: [{ type: "image", data: "AAAA", mimeType: "image/png" }], timestamp: clock++ },
  a([{ type: "thinking", thinking: "first thought" }, t("Let me look."), { type: "thinking", thinking: "second" }, t("Reading now."),
     call("c1", "read", { path: "src/parse.rs", offset: 10, limit: 2.5 }),
     call("c2", "bash", { command: "grep -n \"fn \" src/*.rs\necho 'done'", timeout: null, flags: [1, "x", { deep: true }] }),
     call("c3", "ls", {})], "toolUse", usage(1200, 80, 0.01)),
  r("c1", "read", "fn parse() {}\n"),
  r("c2", "bash", long(2500, "ünïcødé😀 line\n")),
  r("c3", "ls", ""),
  { role: "toolResult", toolCallId: "c4", toolName: "read", content: [t("part one;"), { type: "image", data: "AAAA", mimeType: "image/png" }, t("part two")], isError: true, timestamp: clock++ },
  a([t("")], "stop"),
  a([t("Failed halfway")], "error"),
  { role: "bashExecution", command: "cargo test", output: "ok\n", exitCode: 1, cancelled: false, truncated: false, timestamp: clock++ },
  { role: "bashExecution", command: "secret", output: "hidden", exitCode: 0, cancelled: false, truncated: false, timestamp: clock++, excludeFromContext: true },
  { role: "custom", customType: "note", content: "custom text", display: true, timestamp: clock++ },
  { role: "compactionSummary", summary: "Earlier work summary.", tokensBefore: 500, timestamp: clock++ },
  { role: "branchSummary", summary: "Branch went nowhere.", fromId: "x1", timestamp: clock++ },
  u("Thanks — done? \"quotes\" and \\ backslash"),
];

// ---- sessions for prepareCompaction ----
let ids = 0;
let stamp = 0;
const chain = () => { ids = 0; stamp = 0; return []; };
const base = (list, type) => {
  const id = `e${ids++}`;
  const parentId = list.length ? list[list.length - 1].id : null;
  const timestamp = new Date(Date.UTC(2025, 0, 1, 0, 0, stamp++)).toISOString();
  return { type, id, parentId, timestamp };
};
const msg = (list, message) => { list.push({ ...base(list, "message"), message }); return list; };
const modelChange = (list) => { list.push({ ...base(list, "model_change"), provider: "p", modelId: "m" }); return list; };
const thinkingChange = (list) => { list.push({ ...base(list, "thinking_level_change"), thinkingLevel: "high" }); return list; };
const compaction = (list, firstKeptEntryId, summary, details, fromHook = false) => {
  list.push({ ...base(list, "compaction"), summary, firstKeptEntryId, tokensBefore: 9999, details, fromHook }); return list;
};
const customMessage = (list, text) => {
  const b = base(list, "custom_message");
  list.push({ type: "custom_message", customType: "ext", content: text, display: true, id: b.id, parentId: b.parentId, timestamp: b.timestamp });
  return list;
};
const branchSummary = (list, summary) => { list.push({ ...base(list, "branch_summary"), fromId: "e0", summary }); return list; };

const sessions = {};
{
  const s = chain(); modelChange(s); thinkingChange(s); msg(s, u("hi")); msg(s, a([t("hello")], "stop", usage(30, 5)));
  sessions.tiny = { keepRecentTokens: 20000, entries: s };
}
{
  const s = chain(); modelChange(s);
  msg(s, u(long(400)));
  msg(s, a([t("reading"), call("c1", "read", { path: "a.rs" })], "toolUse", usage(200, 20)));
  msg(s, r("c1", "read", long(4000)));
  msg(s, a([t("done reading")], "stop", usage(1300, 10)));
  msg(s, u(long(200)));
  msg(s, a([call("c2", "edit", { path: "a.rs", oldText: "x", newText: "y" })], "toolUse", usage(1400, 30)));
  msg(s, r("c2", "edit", long(1200)));
  msg(s, a([t("edited")], "stop", usage(1800, 10)));
  msg(s, u("next"));
  msg(s, a([t("ok")], "stop", usage(1810, 2)));
  sessions.turns = { keepRecentTokens: 400, entries: s };
  sessions.turnsBudgetOnToolResult = { keepRecentTokens: 320, entries: s };
  sessions.turnsKeepAll = { keepRecentTokens: 100000, entries: s };
}
{
  const s = chain(); modelChange(s);
  msg(s, u("do the big thing"));
  msg(s, a([call("c1", "read", { path: "big1.rs" })], "toolUse"));
  msg(s, r("c1", "read", long(3000)));
  msg(s, a([call("c2", "write", { path: "out.rs", content: long(100) })], "toolUse"));
  msg(s, r("c2", "write", long(3000)));
  msg(s, a([call("c3", "read", { path: "big2.rs" })], "toolUse"));
  msg(s, r("c3", "read", long(3000)));
  msg(s, a([t("all done")], "stop", usage(3000, 10)));
  sessions.splitTurn = { keepRecentTokens: 1000, entries: s };
}
{
  const s = chain(); modelChange(s);
  msg(s, u(long(800))); msg(s, a([t(long(800)), call("c1", "read", { path: "old.rs" })], "toolUse", usage(500, 200)));
  msg(s, r("c1", "read", long(800)));
  msg(s, u(long(800))); msg(s, a([t(long(800))], "stop", usage(900, 200)));
  compaction(s, "e4", "## Goal\nOld summary", { readFiles: ["old.rs", "kept.rs"], modifiedFiles: ["mod.rs"] });
  msg(s, u(long(800))); msg(s, a([call("c2", "edit", { path: "kept.rs" })], "toolUse", usage(1200, 200)));
  msg(s, r("c2", "edit", "ok"));
  msg(s, a([t(long(800))], "stop", usage(1500, 200)));
  msg(s, u(long(800))); msg(s, a([t(long(800))], "stop", usage(1800, 200)));
  sessions.previousCompaction = { keepRecentTokens: 500, entries: s };
  const hook = structuredClone(s); hook[6].fromHook = true;
  sessions.previousHookCompaction = { keepRecentTokens: 500, entries: hook };
  const lost = structuredClone(s); lost[6].firstKeptEntryId = "missing";
  sessions.previousCompactionLostKept = { keepRecentTokens: 500, entries: lost };
}
{
  const s = chain(); modelChange(s);
  msg(s, u(long(800))); msg(s, a([t(long(800))], "stop", usage(500, 200)));
  thinkingChange(s); modelChange(s);
  msg(s, u(long(800))); msg(s, a([t(long(800))], "stop", usage(900, 200)));
  sessions.settingsBeforeCut = { keepRecentTokens: 300, entries: s };
}
{
  const s = chain(); modelChange(s);
  msg(s, u(long(800))); msg(s, a([t(long(800))], "stop", usage(500, 200)));
  msg(s, { role: "bashExecution", command: "make", output: long(800), exitCode: 0, cancelled: false, truncated: false, timestamp: clock++ });
  msg(s, a([t(long(800))], "stop", usage(900, 200)));
  customMessage(s, long(800));
  msg(s, a([t(long(800))], "stop", usage(1300, 200)));
  branchSummary(s, long(800));
  msg(s, a([t(long(100))], "stop", usage(1500, 200)));
  sessions.bashAndCustom = { keepRecentTokens: 250, entries: s };
  sessions.bashAndCustomWider = { keepRecentTokens: 450, entries: s };
  sessions.bashAndCustomWidest = { keepRecentTokens: 650, entries: s };
  sessions.cutAtCustomMessage = { keepRecentTokens: 150, entries: s };
  sessions.cutAtBranchSummary = { keepRecentTokens: 20, entries: s };
}
{
  const s = chain(); modelChange(s); msg(s, u("x")); msg(s, a([t("y")])); compaction(s, "e1", "S", undefined);
  sessions.alreadyCompacted = { keepRecentTokens: 20000, entries: s };
}
sessions.empty = { keepRecentTokens: 20000, entries: [] };

// ---- expected values ----
const expected = {
  serialized: serializeConversation(convertToLlm(messages)),
  estimates: messages.map(estimateTokens),
  context: estimateContextTokens(messages),
  sessions: {},
};
for (const [name, { keepRecentTokens, entries }] of Object.entries(sessions)) {
  const prep = prepareCompaction(entries, { enabled: true, reserveTokens: 16384, keepRecentTokens });
  if (!prep) { expected.sessions[name] = null; continue; }
  const files = computeFileLists(prep.fileOps);
  expected.sessions[name] = {
    firstKeptEntryId: prep.firstKeptEntryId,
    isSplitTurn: prep.isSplitTurn,
    tokensBefore: prep.tokensBefore,
    previousSummary: prep.previousSummary ?? null,
    summarizeRoles: prep.messagesToSummarize.map((m) => m.role),
    prefixRoles: prep.turnPrefixMessages.map((m) => m.role),
    summarized: serializeConversation(convertToLlm(prep.messagesToSummarize)),
    prefix: serializeConversation(convertToLlm(prep.turnPrefixMessages)),
    readFiles: files.readFiles,
    modifiedFiles: files.modifiedFiles,
    fileBlock: formatFileOperations(files.readFiles, files.modifiedFiles),
  };
}
writeFileSync(join(here, "fixtures.json"), JSON.stringify({ messages, sessions }, null, 1) + "\n");
writeFileSync(join(here, "expected.json"), JSON.stringify(expected, null, 1) + "\n");
