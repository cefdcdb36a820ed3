// Regenerates src/config/catalog.tsv from an installed pi-ai package (the reference's built-in
// chat model catalog), keeping the reference's registry order (providers, then models, as listed).
//
// Run from the repository root, with the pi-ai package of the reference (pi 1.6.0's
// `@earendil-works/pi-ai`, found under `bash tests/install_reference.sh --check 1.6.0`'s package):
//   node tests/gen_catalog.mjs <pi-ai package> > src/config/catalog.tsv
// It also writes src/config/catalog_generated_at.txt: when the reference's built-in model data was
// generated (`dist/providers/data/.manifest.json`'s `generatedAt`, in Unix milliseconds, as pi's
// `getBuiltinModelDataGeneratedAt` reads it), which decides whether a models-store.json catalog
// is newer than the built-ins (the build script makes it `BUILTIN_GENERATED_AT_MS`).
//
// Output: one model per line, 18 fields separated by TAB (pi-rs reads it with splits instead of a
// JSON parse, and Rust's float parser reads the costs back exactly; serde_json's default one was
// 1 ULP off for some of them):
//   provider id name api baseUrl reasoning(0|1) input(comma-separated) costIn costOut cacheRead
//   cacheWrite contextWindow maxTokens thinkingLevelMap headers compat costTiers extra
// thinkingLevelMap, headers and compat are compact JSON objects, costTiers a compact JSON array
// (`cost.tiers`), extra a compact JSON object of every other field of the model in the
// reference's key order (inputLimits, promptCache, type, lab, enabled, providers, free, ...); each
// is empty when absent. Numbers are written as JavaScript prints them, which Rust's f64/u64
// parsers read back to the same values. No field may hold a TAB or a newline (checked).
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync, writeFileSync } from "node:fs";

const pkg = process.argv[2];
if (!pkg) {
  console.error("usage: node tests/gen_catalog.mjs <path-to-pi-ai-package>");
  process.exit(2);
}
const { MODELS } = await import(pathToFileURL(join(pkg, "dist", "models.generated.js")).href);

const columns = new Set([
  "id", "name", "api", "provider", "baseUrl", "reasoning", "thinkingLevelMap", "input", "cost",
  "contextWindow", "maxTokens", "headers", "compat",
]);
const costKeys = new Set(["input", "output", "cacheRead", "cacheWrite", "tiers"]);
const rows = [];
for (const [provider, models] of Object.entries(MODELS)) {
  for (const [id, m] of Object.entries(models)) {
    if (m.provider !== provider || m.id !== id) throw new Error(`${provider}/${id}: key mismatch`);
    for (const n of [m.contextWindow, m.maxTokens]) {
      if (!Number.isInteger(n) || n < 0) throw new Error(`${provider}/${id}: bad token count ${n}`);
    }
    for (const key of Object.keys(m.cost)) {
      if (!costKeys.has(key)) throw new Error(`${provider}/${id}: unexpected cost field ${key}`);
    }
    const extra = {};
    for (const [key, value] of Object.entries(m)) {
      if (!columns.has(key) && value !== undefined) extra[key] = value;
    }
    const json = (v) => (v === undefined || v === null ? "" : JSON.stringify(v));
    const fields = [
      provider, id, m.name, m.api, m.baseUrl, m.reasoning === true ? "1" : "0", m.input.join(","),
      String(m.cost.input), String(m.cost.output), String(m.cost.cacheRead),
      String(m.cost.cacheWrite), String(m.contextWindow), String(m.maxTokens),
      json(m.thinkingLevelMap), json(m.headers), json(m.compat), json(m.cost.tiers),
      Object.keys(extra).length > 0 ? JSON.stringify(extra) : "",
    ];
    for (const f of fields) {
      if (typeof f !== "string" || /[\t\n\r]/.test(f)) throw new Error(`${provider}/${id}: bad field ${f}`);
    }
    if (m.input.some((kind) => kind.includes(","))) throw new Error(`${provider}/${id}: bad input`);
    rows.push(fields.join("\t"));
  }
}
process.stdout.write(rows.join("\n") + "\n");

const manifest = JSON.parse(readFileSync(join(pkg, "dist", "providers", "data", ".manifest.json"), "utf8"));
const generatedAt = Date.parse(manifest.generatedAt);
if (!Number.isInteger(generatedAt) || generatedAt <= 0) {
  throw new Error(`bad generatedAt in the manifest: ${manifest.generatedAt}`);
}
writeFileSync(new URL("../src/config/catalog_generated_at.txt", import.meta.url), `${generatedAt}\n`);
