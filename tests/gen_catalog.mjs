// Regenerates src/config/catalog.json from an installed pi-ai package (the reference's built-in
// model catalog), keeping the reference's registry order (providers, then models, as listed).
//
// Run from the repository root:
//   node tests/gen_catalog.mjs /root/.cache/pi-reference-0.73.1/node_modules/@mariozechner/pi-ai > src/config/catalog.json
//
// Output shape (one model per line so diffs stay readable):
//   {"models":[
//   [provider,id,name,api,baseUrl,reasoning,input,[costIn,costOut,cacheRead,cacheWrite],contextWindow,maxTokens,thinkingLevelMap|null,headers|null,compat|null,compatFirst],
//   ...]}
// `compatFirst` is 1 when the catalog lists headers/compat before `reasoning` (the wire order of
// those models differs), else 0. Every row has all 14 slots so the Rust side can read it as a
// fixed tuple without building intermediate JSON values.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const pkg = process.argv[2];
if (!pkg) {
  console.error("usage: node tests/gen_catalog.mjs <path-to-pi-ai-package>");
  process.exit(2);
}
const { MODELS } = await import(pathToFileURL(join(pkg, "dist", "models.generated.js")).href);

const known = new Set([
  "id", "name", "api", "provider", "baseUrl", "reasoning", "thinkingLevelMap", "input", "cost",
  "contextWindow", "maxTokens", "headers", "compat",
]);
const rows = [];
for (const [provider, models] of Object.entries(MODELS)) {
  for (const [id, m] of Object.entries(models)) {
    for (const key of Object.keys(m)) {
      if (!known.has(key)) throw new Error(`${provider}/${id}: unexpected field ${key}`);
    }
    if (m.provider !== provider || m.id !== id) throw new Error(`${provider}/${id}: key mismatch`);
    for (const n of [m.contextWindow, m.maxTokens]) {
      if (!Number.isInteger(n) || n < 0) throw new Error(`${provider}/${id}: bad token count ${n}`);
    }
    const keys = Object.keys(m);
    const reasoningAt = keys.indexOf("reasoning");
    const compatFirst = keys.some((k, i) => (k === "headers" || k === "compat") && i < reasoningAt) ? 1 : 0;
    rows.push([
      provider, id, m.name, m.api, m.baseUrl, m.reasoning === true, m.input,
      [m.cost.input, m.cost.output, m.cost.cacheRead, m.cost.cacheWrite],
      m.contextWindow, m.maxTokens, m.thinkingLevelMap ?? null, m.headers ?? null, m.compat ?? null,
      compatFirst,
    ]);
  }
}
process.stdout.write('{"models":[\n' + rows.map((r) => JSON.stringify(r)).join(",\n") + "\n]}\n");
