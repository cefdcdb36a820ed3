// pi-rs's host for pi's TypeScript extensions (README "Extensions", "TypeScript extensions").
//
// pi-rs embeds this file, writes it to a private cache file and starts it as ONE protocol-2
// extension: `node <this file>`, with the run's TypeScript extensions in $PI_RS_TS_HOST (JSON:
// {extensions, package, exe}). It loads them with the pi package's own loader and extension
// runner (found on the machine, never copied into pi-rs) and translates: registrations → the
// `register` line; pi-rs's events and hooks → the runner; the runner's actions and ctx getters →
// v2 queries and actions; ctx.ui → the UI sub-protocol (as pi's RPC mode: hasUI true, mode "rpc",
// custom() undefined).
//
// stdout carries protocol lines only: console.* and process.stdout.write go to stderr before any
// extension is loaded. Errors about one extension are `error` lines naming it
// (`extensionPath`, `event`); the others still load.

import { Console } from "node:console";
import { realpathSync } from "node:fs";
import * as nodeModule from "node:module";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const MIN_NODE = [22, 19];

// ---- stdout is protocol only --------------------------------------------------------------------

const protocolWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);
globalThis.console = new Console({ stdout: process.stderr, stderr: process.stderr });

function send(message) {
	protocolWrite(`${JSON.stringify(message)}\n`);
}

const config = JSON.parse(process.env.PI_RS_TS_HOST ?? "{}");
delete process.env.PI_RS_TS_HOST;
const extensionPaths = Array.isArray(config.extensions) ? config.extensions : [];

// Subagent-style extensions start `process.execPath` (with argv[1] when it is a script): both
// lead back to pi-rs, not to this host.
if (config.exe) {
	process.execPath = config.exe;
	process.argv = [config.exe];
}

// The first line must be `register`: errors found while loading wait for it.
let beforeRegister = [];

function reportError(extensionPath, event, error) {
	const line = { type: "error", error: String(error), extensionPath, event };
	if (beforeRegister) beforeRegister.push(line);
	else send(line);
}

function errorText(err) {
	return err instanceof Error ? err.message : String(err);
}

// ---- requests to pi-rs (queries and control actions) ----------------------------------------------

let nextRequest = 0;
const pendingRequests = new Map();

/** Sends a request; `onUpdate` gets its `action_update`s (execute_tool). Returns its id and answer. */
function startRequest(message, onUpdate) {
	const id = `h${++nextRequest}`;
	const done = new Promise((resolve, reject) => {
		pendingRequests.set(id, { resolve, reject, onUpdate });
		const line = { ...message, id };
		// A request made while the extensions load (pi.exec in a factory) waits for `register`.
		if (beforeRegister) beforeRegister.push(line);
		else send(line);
	});
	return { id, done };
}

const request = (message) => startRequest(message).done;

const query = (name, fields = {}) => request({ type: "query", query: name, ...fields });
const control = (type, fields = {}) => request({ type, ...fields });

function fireAndReport(promise, event) {
	promise.catch((err) => reportError("<runtime>", event, errorText(err)));
}

// ---- pi's built-in tools and pi.exec run through pi-rs -------------------------------------------
//
// The tools of pi's factories (createBashTool, createReadToolDefinition, …), ctx.executeTool and
// pi.exec become v2 `execute_tool` / `exec` requests, so pi-rs's approval gate, sandbox, redaction
// and abort apply to them. The factories are reached through a module load hook: when Node loads
// the pi package's dist/core/tools/<name>.js (and dist/core/exec.js), the exported factory is
// renamed and a wrapper of the same name exported in its place (the module's own callers, such as
// createBashTool, call the wrapper too). A factory given its own `operations` (a remote backend:
// ssh, a container) keeps them: that backend is the extension's business.

const ROUTING = Symbol.for("pi-rs.ts-host.routing");
const BUILTIN_TOOLS = ["read", "bash", "edit", "write", "grep", "find", "ls"];
const ORIGINAL = "__piRsOriginal_";

/** `source` with `exported` (a declaration such as `export function f(`) renamed and `wrapper`
 * exported in its place; undefined when the declaration is not there (another pi version). */
function wrapExport(source, exported, name, wrapper) {
	if (!source.includes(exported)) return undefined;
	const original = exported.replace("export ", "").replace(`function ${name}(`, `function ${ORIGINAL}${name}(`);
	return `${source.replace(exported, original)}\nexport function ${name}${wrapper}\n`;
}

function routeThroughPiRs() {
	if (!config.package) return;
	if (typeof nodeModule.registerHooks !== "function") {
		console.error(`pi-rs host: Node ${process.versions.node} has no module.registerHooks; pi's tool factories run inside the host`);
		return;
	}
	let root;
	try {
		root = pathToFileURL(realpathSync(config.package)).href;
	} catch {
		return;
	}
	const rewrites = new Map();
	for (const name of BUILTIN_TOOLS) {
		const factory = `create${name[0].toUpperCase()}${name.slice(1)}ToolDefinition`;
		rewrites.set(`${root}/dist/core/tools/${name}.js`, (source) =>
			wrapExport(
				source,
				`export function ${factory}(`,
				factory,
				`(cwd, options) { return globalThis[Symbol.for("pi-rs.ts-host.routing")].tool(${JSON.stringify(name)}, ${ORIGINAL}${factory}(cwd, options), cwd, options); }`,
			),
		);
	}
	rewrites.set(`${root}/dist/core/exec.js`, (source) =>
		wrapExport(
			source,
			"export async function execCommand(",
			"execCommand",
			`(command, args, cwd, options) { return globalThis[Symbol.for("pi-rs.ts-host.routing")].exec(command, args, cwd, options); }`,
		),
	);
	nodeModule.registerHooks({
		load(url, context, nextLoad) {
			const loaded = nextLoad(url, context);
			const rewrite = rewrites.get(url);
			if (!rewrite || loaded.source == null) return loaded;
			const source = typeof loaded.source === "string" ? loaded.source : Buffer.from(loaded.source).toString("utf8");
			const changed = rewrite(source);
			if (changed === undefined) {
				console.error(`pi-rs host: ${url} has no factory to route; its tools run inside the host`);
				return loaded;
			}
			return { ...loaded, source: changed };
		},
	});
}

/** Set at `session_shutdown`: pi-rs stops the host and answers no more requests. */
let stopping = false;
const STOPPING = "pi-rs is stopping its extensions and runs no more tools or commands for them";

/** Runs pi-rs's built-in `name`; resolves to `{content, details?, isError}` (never rejects for a
 * tool failure; pi-rs's refusals come back as error results). */
async function executeBuiltin(name, args, cwd, signal, onUpdate) {
	if (signal?.aborted) return { content: [{ type: "text", text: "Operation aborted" }], isError: true };
	if (stopping) return { content: [{ type: "text", text: STOPPING }], isError: true };
	const fields = { toolName: name, args };
	if (cwd && cwd !== state.hello?.cwd) fields.cwd = cwd;
	const update = onUpdate ? (partial) => onUpdate({ content: partial?.content ?? [], details: partial?.details }) : undefined;
	const { id, done } = startRequest({ type: "execute_tool", ...fields }, update);
	const cancel = () => send({ type: "cancel_request", requestId: id });
	signal?.addEventListener("abort", cancel, { once: true });
	try {
		return await done;
	} catch (err) {
		return { content: [{ type: "text", text: errorText(err) }], isError: true };
	} finally {
		signal?.removeEventListener("abort", cancel);
	}
}

const resultText = (result) =>
	(result.content ?? [])
		.filter((block) => block.type === "text")
		.map((block) => block.text)
		.join("\n");

const shellQuote = (text) => `'${text.replaceAll("'", "'\\''")}'`;

/** bash's `commandPrefix` and `spawnHook` applied here: the command pi-rs runs (and its gate
 * judges) carries the hook's command, its cwd and its environment changes. */
function bashArguments(params, cwd, options) {
	let command = options?.commandPrefix ? `${options.commandPrefix}\n${params.command}` : params.command;
	if (!options?.spawnHook) return { args: { ...params, command }, cwd };
	const base = { ...process.env };
	const spawned = options.spawnHook({ command, cwd, env: { ...base } }) ?? {};
	const env = spawned.env ?? base;
	const lines = [];
	const isName = (key) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(key);
	for (const [key, value] of Object.entries(env)) {
		if (isName(key) && value !== undefined && base[key] !== value) lines.push(`export ${key}=${shellQuote(String(value))}`);
	}
	for (const key of Object.keys(base)) if (isName(key) && !(key in env)) lines.push(`unset ${key}`);
	command = [...lines, spawned.command ?? command].join("\n");
	return { args: { ...params, command }, cwd: spawned.cwd ?? cwd };
}

/** A factory's tool definition whose execute runs pi-rs's built-in (pi's tools throw on failure). */
function routedTool(name, definition, cwd, options) {
	if (options?.operations) return definition;
	return {
		...definition,
		async execute(_toolCallId, params, signal, onUpdate, ctx) {
			const runCwd = ctx?.cwd || cwd;
			const routed = name === "bash" ? bashArguments(params, runCwd, options) : { args: params, cwd: runCwd };
			const result = await executeBuiltin(name, routed.args, routed.cwd, signal, onUpdate);
			if (result.isError) throw new Error(resultText(result));
			return { content: result.content ?? [], details: result.details ?? undefined };
		},
	};
}

/** pi.exec through pi-rs: its result shape; a refusal or a program that cannot start is a
 * failed run (code 1, the reason on stderr), as pi reports a program that cannot start. */
async function routedExec(command, args, cwd, options) {
	const maxBuffer = options?.maxBuffer;
	if (maxBuffer !== undefined && (!Number.isInteger(maxBuffer) || maxBuffer < 0)) {
		throw new RangeError("maxBuffer must be a whole number of bytes");
	}
	const fields = { command, args: (args ?? []).map(String), cwd, maxBuffer };
	if (options?.timeout && options.timeout > 0) fields.timeout = Math.ceil(options.timeout);
	const signal = options?.signal;
	if (signal?.aborted) return { stdout: "", stderr: "", code: 143, killed: true, truncated: false };
	if (stopping) return { stdout: "", stderr: STOPPING, code: 1, killed: false, truncated: false };
	const { id, done } = startRequest({ type: "exec", ...fields });
	const cancel = () => send({ type: "cancel_request", requestId: id });
	signal?.addEventListener("abort", cancel, { once: true });
	try {
		return await done;
	} catch (err) {
		return { stdout: "", stderr: errorText(err), code: 1, killed: false, truncated: false };
	} finally {
		signal?.removeEventListener("abort", cancel);
	}
}

let nestedCalls = 0;

/** ctx.executeTool: a tool a TypeScript extension registered runs here (as pi, the registered
 * tool wins over a built-in of its name); a built-in runs in pi-rs. Never rejects. */
async function executeTool(runner, callerId, name, args, options = {}) {
	const toolCall = { type: "toolCall", id: `${callerId}/${++nestedCalls}`, name, arguments: args };
	const failed = (text) => ({ toolCall, result: { content: [{ type: "text", text }], details: {} }, isError: true });
	const own = runner.getToolDefinition(name);
	if (!own && !BUILTIN_TOOLS.includes(name)) return failed(`Tool ${name} not found`);
	const started = Date.now();
	let result;
	if (own) {
		try {
			const ctx = runner.createToolContext(toolCall.id, options.signal);
			const prepared = own.prepareArguments ? own.prepareArguments(args) : args;
			result = await own.execute(toolCall.id, prepared, options.signal, options.onUpdate, ctx);
		} catch (err) {
			result = { content: [{ type: "text", text: errorText(err) }], details: {}, isError: true };
		}
	} else {
		result = await executeBuiltin(name, args, undefined, options.signal, options.onUpdate);
	}
	// As 1.6.0: a call that ran says how long it took.
	return {
		toolCall,
		result: { content: result?.content ?? [], details: result?.details },
		isError: result?.isError === true,
		durationMs: Date.now() - started,
	};
}

/** ctx.tools: the active tools as agent tools (name, label, description, parameters, execute):
 * a TypeScript extension's own, or a built-in that runs in pi-rs. MCP tools and executable
 * extensions' tools are left out (executeTool cannot reach them). */
function callableTools(runner) {
	const tools = [];
	for (const name of state.activeTools) {
		const own = runner.getToolDefinition(name);
		if (own) {
			tools.push({ ...own, label: own.label ?? name });
			continue;
		}
		const info = state.allTools.find((t) => t.name === name);
		if (!BUILTIN_TOOLS.includes(name) || !info) continue;
		tools.push({
			name,
			label: name,
			description: info.description,
			parameters: info.parameters,
			execute: async (_toolCallId, params, signal, onUpdate) => {
				const result = await executeBuiltin(name, params, undefined, signal, onUpdate);
				if (result.isError) throw new Error(resultText(result));
				return { content: result.content ?? [], details: result.details ?? undefined };
			},
		});
	}
	return tools;
}

globalThis[ROUTING] = { tool: routedTool, exec: routedExec };
routeThroughPiRs();

// ---- what the host knows of pi-rs's state (sync getters read these) -------------------------------

const state = {
	hello: undefined,
	model: undefined,
	thinkingLevel: "off",
	activeTools: [],
	allTools: [],
	commands: [],
	sessionName: undefined,
	contextUsage: undefined,
	systemPrompt: "",
	settings: {},
	trusted: false,
	idle: true,
	runAbort: undefined,
};

async function refreshState() {
	const [model, activeTools, allTools, commands, sessionName, contextUsage, systemPrompt, settings] =
		await Promise.all(
			["model", "active_tools", "all_tools", "commands", "session_name", "context_usage", "system_prompt", "settings"].map(
				(name) => query(name).catch(() => undefined),
			),
		);
	if (settings) state.settings = settings;
	if (model) {
		state.model = model.model ?? undefined;
		state.thinkingLevel = model.thinkingLevel ?? state.thinkingLevel;
	}
	if (activeTools) state.activeTools = activeTools;
	if (allTools) state.allTools = allTools;
	if (commands) state.commands = commands;
	state.sessionName = sessionName ?? undefined;
	state.contextUsage = contextUsage ?? undefined;
	if (typeof systemPrompt === "string") state.systemPrompt = systemPrompt;
}

// ---- ctx.sessionManager: a read-only view of pi-rs's session --------------------------------------

const session = { entries: [], info: {} };

/** Reads the session anew (at session_start, after each turn, before each command). */
async function refreshSession() {
	const [entries, info] = await Promise.all([query("entries"), query("session")]);
	session.entries = Array.isArray(entries) ? entries : [];
	session.info = info ?? {};
}

function branchTo(leafId) {
	const byId = new Map(session.entries.map((e) => [e.id, e]));
	const branch = [];
	for (let entry = byId.get(leafId); entry; entry = byId.get(entry.parentId)) branch.unshift(entry);
	return branch;
}

const sessionView = {
	getEntries: () => session.entries,
	getBranch: (fromId) => branchTo(fromId ?? session.info.leafId),
	getLeafId: () => session.info.leafId ?? null,
	getLeafEntry: () => session.entries.find((e) => e.id === session.info.leafId),
	getEntry: (id) => session.entries.find((e) => e.id === id),
	getLabel: (id) => {
		let label;
		for (const e of session.entries) if (e.type === "label" && e.targetId === id) label = e.label ?? undefined;
		return label;
	},
	getSessionId: () => session.info.sessionId,
	getSessionFile: () => session.info.sessionFile ?? undefined,
	getSessionDir: () => session.info.sessionDir,
	getSessionName: () => session.info.sessionName ?? undefined,
	getCwd: () => session.info.cwd,
	getHeader: () => session.info.header,
	isPersisted: () => Boolean(session.info.sessionFile),
};

// Methods pi-rs does not offer fail with a clear message instead of "not a function".
const sessionManager = new Proxy(sessionView, {
	get(target, name) {
		if (name in target || typeof name === "symbol") return target[name];
		return () => {
			throw new Error(`ctx.sessionManager.${String(name)} is not available under pi-rs (its session is read-only to extensions)`);
		};
	},
});

// ---- ctx.ui: the UI sub-protocol -----------------------------------------------------------------

let nextDialog = 0;
const pendingDialogs = new Map();

function dialog(method, fields, opts, defaultValue, parse) {
	if (opts?.signal?.aborted) return Promise.resolve(defaultValue);
	const id = `d${++nextDialog}`;
	return new Promise((resolve) => {
		const onAbort = () => {
			pendingDialogs.delete(id);
			resolve(defaultValue);
		};
		opts?.signal?.addEventListener("abort", onAbort, { once: true });
		pendingDialogs.set(id, (response) => {
			opts?.signal?.removeEventListener("abort", onAbort);
			resolve(response.cancelled ? defaultValue : parse(response));
		});
		const timeout = typeof opts?.timeout === "number" ? { timeout: opts.timeout } : {};
		send({ type: "ui", id, method, ...fields, ...timeout });
	});
}

const notice = (method, fields) => send({ type: "ui", method, ...fields });

const uiContext = {
	select: (title, options, opts) => dialog("select", { title, options }, opts, undefined, (r) => r.value ?? undefined),
	confirm: (title, message, opts) => dialog("confirm", { title, message }, opts, false, (r) => r.confirmed === true),
	input: (title, placeholder, opts) =>
		dialog("input", { title, placeholder }, opts, undefined, (r) => r.value ?? undefined),
	editor: (title, prefill) => dialog("editor", { title, prefill }, undefined, undefined, (r) => r.value ?? undefined),
	notify: (message, type) => notice("notify", { message, notifyType: type }),
	setStatus: (key, text) => notice("setStatus", { statusKey: key, statusText: text }),
	setWidget: (key, content, options) => {
		// As pi's RPC mode: string lines only; component factories need a terminal.
		if (content === undefined || Array.isArray(content)) {
			notice("setWidget", { widgetKey: key, widgetLines: content, widgetPlacement: options?.placement });
		}
	},
	setTitle: (title) => notice("setTitle", { title }),
	setEditorText: (text) => notice("set_editor_text", { text }),
	pasteToEditor: (text) => notice("set_editor_text", { text }),
	getEditorText: () => "",
	custom: async () => undefined,
	onTerminalInput: () => () => {},
	setWorkingMessage: () => {},
	setWorkingVisible: () => {},
	setWorkingIndicator: () => {},
	setHiddenThinkingLabel: () => {},
	setFooter: () => {},
	setHeader: () => {},
	addAutocompleteProvider: () => {},
	setEditorComponent: () => {},
	getEditorComponent: () => undefined,
	theme: undefined,
	getAllThemes: () => [],
	getTheme: () => undefined,
	setTheme: () => ({ success: false, error: "Theme switching not supported in RPC mode" }),
	getToolsExpanded: () => false,
	setToolsExpanded: () => {},
};

// ---- loading --------------------------------------------------------------------------------------

function nodeTooOld() {
	const [major, minor] = process.versions.node.split(".").map(Number);
	return major < MIN_NODE[0] || (major === MIN_NODE[0] && minor < MIN_NODE[1]);
}

async function loadPi() {
	const root = config.package;
	const url = (relative) => pathToFileURL(path.join(root, relative)).href;
	// The modules themselves, not dist/index.js: an extension that does not import the package
	// does not pay for all of it.
	const [loader, runner, eventBus] = await Promise.all(
		[
			"dist/core/extensions/loader.js",
			"dist/core/extensions/runner.js",
			"dist/core/event-bus.js",
		].map((file) => import(url(file))),
	);
	const needed = {
		ExtensionRunner: runner.ExtensionRunner,
		createEventBus: eventBus.createEventBus,
		loadExtensions: loader.loadExtensions,
		createExtensionRuntime: loader.createExtensionRuntime,
	};
	const missing = Object.entries(needed)
		.filter(([, value]) => typeof value !== "function")
		.map(([name]) => name);
	if (missing.length > 0) {
		throw new Error(`the pi package at ${root} does not export ${missing.join(", ")}; install pi 1.6.0 or newer`);
	}
	return needed;
}

/** Loads every extension; returns the runner (or undefined when nothing could be loaded). */
async function load(cwd) {
	if (nodeTooOld()) {
		const problem = `Node ${process.versions.node} (${process.execPath}) is too old for TypeScript extensions: install Node ${MIN_NODE.join(".")} or newer, or name one with PI_RS_NODE`;
		for (const p of extensionPaths) reportError(p, "load", problem);
		return undefined;
	}
	let pi;
	try {
		pi = await loadPi();
	} catch (err) {
		const problem = `cannot load the pi package (${config.package}): ${errorText(err)}`;
		for (const p of extensionPaths) reportError(p, "load", problem);
		return undefined;
	}
	const eventBus = pi.createEventBus();
	const runtime = pi.createExtensionRuntime();
	const result = await pi.loadExtensions(extensionPaths, cwd, eventBus, runtime);
	for (const { path: p, error } of result.errors) reportError(p, "load", error);
	const runner = new pi.ExtensionRunner(result.extensions, result.runtime, cwd, sessionManager, modelRegistry);
	bind(runner);
	return runner;
}

// ---- ctx.modelRegistry: pi-rs's model registry ---------------------------------------------------

const models = { all: [], available: [] };

/** Reads pi-rs's registry anew (`models` query): at start and after a provider (un)registers. */
async function refreshModels() {
	const answer = await query("models");
	models.all = Array.isArray(answer?.all) ? answer.all : [];
	models.available = Array.isArray(answer?.available) ? answer.available : [];
}

/** pi-ai as extensions see it (the package's extension view), loaded on first use. */
let piAiView;
function piAi() {
	piAiView ??= import(pathToFileURL(path.join(config.package, "dist/core/extensions/pi-ai-extension-view.js")).href);
	return piAiView;
}

const findModel = (provider, id) => models.all.find((m) => m.provider === provider && m.id === id);
const ofType = (type) => (m) => (m.type ?? "chat") === type;

/** The credential pi-rs resolved for a model (`auth` query), as pi's getApiKeyAndHeaders. */
async function requestAuth(model) {
	try {
		const auth = await query("auth", { provider: model.provider, modelId: model.id });
		return { ok: true, apiKey: auth?.apiKey ?? undefined, headers: auth?.headers ?? {} };
	} catch (err) {
		return { ok: false, error: errorText(err) };
	}
}

/** An extension's own model call: pi-ai in this process, with pi-rs's credentials (README). */
async function modelCall(kind, model, context, options) {
	const streamer = providerStreamers.get(model.provider);
	const auth = await requestAuth(model);
	if (!auth.ok) throw new Error(auth.error);
	const withAuth = { ...options, apiKey: options?.apiKey ?? auth.apiKey, headers: { ...auth.headers, ...options?.headers } };
	if (streamer) return streamer(model, (await piAi()).normalizeContext(context), withAuth);
	return (await piAi())[kind](model, context, withAuth);
}

/** An event stream whose source is found asynchronously (pi's AssistantMessageEventStream surface). */
function laterStream(source) {
	return {
		async *[Symbol.asyncIterator]() {
			yield* await source;
		},
		result: async () => (await source).result(),
	};
}

const modelRegistryView = {
	refresh: async () => {
		await refreshModels();
		return { aborted: false, errors: new Map() };
	},
	getError: () => undefined,
	getAll: () => [...models.all],
	getAvailable: () => [...models.available],
	find: (provider, id) => findModel(provider, id),
	findOfType: (type, provider, id) => models.all.filter(ofType(type)).find((m) => m.provider === provider && m.id === id),
	getModelOfType: (type, provider, id) => modelRegistryView.findOfType(type, provider, id),
	getModelsOfType: (type, provider) => models.all.filter((m) => ofType(type)(m) && (!provider || m.provider === provider)),
	getAvailableOfType: async (type, provider) =>
		models.available.filter((m) => ofType(type)(m) && (!provider || m.provider === provider)),
	hasConfiguredAuth: (model) => models.available.some((m) => m.provider === model.provider),
	getProviderAuthStatus: (provider) => ({ configured: models.available.some((m) => m.provider === provider) }),
	getProviderDisplayName: (provider) => provider,
	isUsingOAuth: () => false,
	getApiKeyAndHeaders: (model) => requestAuth(model),
	getApiKeyForProvider: async (provider) => (await query("auth", { provider }).catch(() => undefined))?.apiKey ?? undefined,
	getProviderAuth: async (provider) => {
		const auth = await query("auth", { provider }).catch(() => undefined);
		return auth?.apiKey ? { auth: { apiKey: auth.apiKey } } : undefined;
	},
	// Older pi's name (0.x): the key for a model's provider.
	getApiKey: async (model) => (await requestAuth(model)).apiKey,
	stream: (model, context, options) => laterStream(modelCall("stream", model, context, options)),
	streamSimple: (model, context, options) => laterStream(modelCall("streamSimple", model, context, options)),
	complete: async (model, context, options) => (await modelCall("stream", model, context, options)).result(),
	completeSimple: async (model, context, options) => (await modelCall("streamSimple", model, context, options)).result(),
	registerProvider: (name, providerConfig) => registerProvider(name, providerConfig),
	unregisterProvider: (name) => unregisterProvider(name),
	getRegisteredProviderIds: () => [...registeredProviders.keys()],
	getRegisteredProviderConfig: (name) => registeredProviders.get(name),
};

const modelRegistry = new Proxy(modelRegistryView, {
	get(target, name) {
		if (name in target || typeof name === "symbol" || name === "then" || name === "toJSON") return target[name];
		return () => {
			throw new Error(`ctx.modelRegistry.${String(name)} is not available under pi-rs`);
		};
	},
});

// ---- pi.registerProvider → v2 register_provider -----------------------------------------------------

/** Providers registered from TypeScript: name → the config as the extension gave it. */
const registeredProviders = new Map();
/** Providers whose `streamSimple` is a function: name → that function (it serves `stream_request`). */
const providerStreamers = new Map();
/** Registrations made while loading: they go into the `register` line. */
let providersAtStart = [];

const PROVIDER_FIELDS = ["name", "baseUrl", "apiKey", "api", "headers", "authHeader", "compat", "models"];

/** pi's provider config → v2's JSON form: a `streamSimple` function becomes `streamSimple: true`,
 * a `refreshModels` function `refreshModels: true` (pi-rs then asks `refresh_models`). */
function providerLine(name, providerConfig) {
	const out = {};
	for (const key of PROVIDER_FIELDS) if (providerConfig?.[key] !== undefined) out[key] = providerConfig[key];
	if (typeof providerConfig?.streamSimple === "function") out.streamSimple = true;
	if (typeof providerConfig?.refreshModels === "function") out.refreshModels = true;
	// pi-rs asks `oauth_refresh` when the stored login runs out, `oauth_api_key` for the key of a
	// login and `oauth_modify_models` for the models a login sees; `login` has no JSONL form.
	const oauth = providerConfig?.oauth;
	if (typeof oauth?.refreshToken === "function") {
		out.oauth = typeof oauth.name === "string" ? { name: oauth.name } : {};
		if (typeof oauth.getApiKey === "function") out.oauth.getApiKey = true;
		if (typeof oauth.modifyModels === "function") out.oauth.modifyModels = true;
	}
	return { name, config: JSON.parse(JSON.stringify(out)) };
}

function registerProvider(name, providerConfig) {
	if (typeof name !== "string") throw new Error("registerProvider: a native provider object is not supported by pi-rs; give a name and a config");
	registeredProviders.set(name, providerConfig);
	if (typeof providerConfig?.streamSimple === "function") providerStreamers.set(name, providerConfig.streamSimple);
	else providerStreamers.delete(name);
	const line = providerLine(name, providerConfig);
	if (providersAtStart) {
		providersAtStart = providersAtStart.filter((p) => p.name !== name).concat(line);
		return;
	}
	fireAndReport(control("register_provider", line).then(refreshModels), "register_provider");
}

function unregisterProvider(name) {
	registeredProviders.delete(name);
	providerStreamers.delete(name);
	if (providersAtStart) {
		providersAtStart = providersAtStart.filter((p) => p.name !== name);
		return;
	}
	fireAndReport(control("unregister_provider", { name }).then(refreshModels), "unregister_provider");
}

// ---- oauth_refresh: a provider whose oauth has a refreshToken function --------------------------

/** Calls the provider's `oauth.refreshToken(credentials, signal)` with the stored login (the
 * signal aborts at the request's deadline); the new credentials answer `oauth_refresh`. */
async function serveOauthRefresh(message) {
	const request = message.request ?? {};
	const abort = new AbortController();
	const timer = typeof message.deadlineMs === "number" ? setTimeout(() => abort.abort(), message.deadlineMs) : undefined;
	try {
		const oauth = registeredProviders.get(request.provider)?.oauth;
		if (typeof oauth?.refreshToken !== "function") {
			throw new Error(`provider ${request.provider} has no oauth.refreshToken function`);
		}
		// As 1.6.0: the login as stored, `type` included.
		const result = await oauth.refreshToken(request.credential ?? {}, abort.signal);
		send({ type: "oauth_refresh_result", id: message.id, result: JSON.parse(JSON.stringify(result)) });
	} catch (err) {
		send({ type: "oauth_refresh_result", id: message.id, error: errorText(err) });
	} finally {
		clearTimeout(timer);
	}
}

/** `oauth_api_key` and `oauth_modify_models`: the provider's `oauth.getApiKey(credential)` and
 * `oauth.modifyModels(models, credential)` (both synchronous in pi), with the login as stored. */
async function serveOauthCall(message) {
	const request = message.request ?? {};
	const answer = message.type === "oauth_api_key" ? "oauth_api_key_result" : "oauth_modify_models_result";
	try {
		const oauth = registeredProviders.get(request.provider)?.oauth;
		if (message.type === "oauth_api_key") {
			if (typeof oauth?.getApiKey !== "function") throw new Error(`provider ${request.provider} has no oauth.getApiKey function`);
			const apiKey = await oauth.getApiKey(request.credential ?? {});
			if (typeof apiKey !== "string") throw new Error("oauth.getApiKey must return a string");
			send({ type: answer, id: message.id, result: { apiKey } });
			return;
		}
		if (typeof oauth?.modifyModels !== "function") throw new Error(`provider ${request.provider} has no oauth.modifyModels function`);
		const models = await oauth.modifyModels(Array.isArray(request.models) ? request.models : [], request.credential ?? {});
		if (!Array.isArray(models)) throw new Error("oauth.modifyModels must return an array of models");
		send({ type: answer, id: message.id, result: { models: JSON.parse(JSON.stringify(models)) } });
	} catch (err) {
		send({ type: answer, id: message.id, error: errorText(err) });
	}
}

// ---- refresh_models: a provider whose refreshModels is a function ---------------------------------

/** Calls the provider's `refreshModels` with pi's context (no persisted snapshot under pi-rs:
 * `stored` is undefined and `publish` changes nothing); its models answer `refresh_models`. */
async function serveRefresh(message) {
	const request = message.request ?? {};
	const abort = new AbortController();
	const timer = typeof message.deadlineMs === "number" ? setTimeout(() => abort.abort(), message.deadlineMs) : undefined;
	try {
		const providerConfig = registeredProviders.get(request.provider);
		if (typeof providerConfig?.refreshModels !== "function") {
			throw new Error(`provider ${request.provider} has no refreshModels function`);
		}
		const models = await providerConfig.refreshModels({
			allowNetwork: request.allowNetwork !== false,
			signal: abort.signal,
			baseUrl: providerConfig.baseUrl,
			stored: undefined,
			publish: async () => false,
		});
		if (!Array.isArray(models)) throw new Error("refreshModels must return an array of model definitions");
		send({ type: "refresh_models_result", id: message.id, result: { models: JSON.parse(JSON.stringify(models)) } });
	} catch (err) {
		send({ type: "refresh_models_result", id: message.id, error: errorText(err) });
	} finally {
		clearTimeout(timer);
	}
}

// ---- pi.registerVirtualModel → v2 virtual models ---------------------------------------------------

/** Virtual models registered from TypeScript: "provider/id" → the definition (with `route`). */
const virtualModels = new Map();
/** Registrations made while loading: they go into the `register` line's `virtualModels`. */
let virtualModelsAtStart = [];

const VIRTUAL_FIELDS = ["provider", "id", "name", "thinkingLevels", "contextWindow", "maxTokens", "input"];
const THINKING_LEVELS = new Set(["off", "minimal", "low", "medium", "high", "xhigh", "max"]);
const virtualKey = (provider, id) => `${provider}/${id}`;

/** pi's definition → v2's JSON form (without `route`). Checked here, so that one bad definition
 * is an error of its own and does not make the whole `register` line malformed. */
function virtualModelLine(definition) {
	const { provider, id } = definition ?? {};
	if (typeof provider !== "string" || !provider.trim() || typeof id !== "string" || !id.trim()) {
		throw new Error("Virtual model provider and id must not be empty.");
	}
	if (typeof definition.route !== "function") throw new Error(`Virtual model ${virtualKey(provider, id)} has no route function.`);
	const levels = definition.thinkingLevels;
	if (levels !== undefined && (!Array.isArray(levels) || levels.some((l) => !THINKING_LEVELS.has(l)))) {
		throw new Error(`Virtual model ${virtualKey(provider, id)}: thinkingLevels must be thinking levels`);
	}
	for (const key of ["contextWindow", "maxTokens"]) {
		const value = definition[key];
		if (value !== undefined && !(Number.isInteger(value) && value >= 0)) {
			throw new Error(`Virtual model ${virtualKey(provider, id)}: ${key} must be a whole number`);
		}
	}
	const out = {};
	for (const key of VIRTUAL_FIELDS) if (definition[key] !== undefined) out[key] = definition[key];
	return JSON.parse(JSON.stringify(out));
}

function registerVirtualModel(definition) {
	const line = virtualModelLine(definition);
	const key = virtualKey(line.provider, line.id);
	virtualModels.set(key, definition);
	if (virtualModelsAtStart) {
		virtualModelsAtStart = virtualModelsAtStart.filter((m) => virtualKey(m.provider, m.id) !== key).concat(line);
		return;
	}
	fireAndReport(control("register_virtual_model", { model: line }).then(refreshModels), "register_virtual_model");
}

function unregisterVirtualModel(provider, id) {
	const key = virtualKey(provider, id);
	virtualModels.delete(key);
	if (virtualModelsAtStart) {
		virtualModelsAtStart = virtualModelsAtStart.filter((m) => virtualKey(m.provider, m.id) !== key);
		return;
	}
	fireAndReport(control("unregister_virtual_model", { provider, modelId: id }).then(refreshModels), "unregister_virtual_model");
}

/** pi-rs's `route`: the definition's `route(request)` (pi's loader adds the ctx) picks the
 * physical model; an exception is an error answer. */
async function serveRoute(message) {
	const request = message.request ?? {};
	const key = virtualKey(request.model?.provider, request.model?.id);
	const abort = new AbortController();
	const timer = typeof message.deadlineMs === "number" ? setTimeout(() => abort.abort(), message.deadlineMs) : undefined;
	try {
		const definition = virtualModels.get(key);
		if (!definition) throw new Error(`Virtual model ${key} is not registered.`);
		const route = await definition.route({ ...request, signal: abort.signal });
		const model = route?.model;
		if (typeof model?.provider !== "string" || typeof model?.id !== "string") {
			throw new Error(`Virtual model ${key}: route() returned no model`);
		}
		const result = { model: { provider: model.provider, id: model.id }, thinkingLevel: route.thinkingLevel };
		// Returning request.state itself (or nothing) keeps the current state, as in pi.
		if (route.state !== undefined && route.state !== request.state) result.state = JSON.parse(JSON.stringify(route.state));
		send({ type: "route_result", id: message.id, result });
	} catch (err) {
		send({ type: "route_result", id: message.id, error: errorText(err) });
	} finally {
		clearTimeout(timer);
	}
}

// ---- stream_request: a provider whose streamSimple is a function ----------------------------------

const runningStreams = new Map();

/** pi-ai's stream events → v2 `stream_event`s (README "A provider the extension streams itself"). */
function streamEvent(event) {
	switch (event.type) {
		case "start":
			return { type: "start" };
		case "text_start":
		case "thinking_start":
			return { type: event.type, contentIndex: event.contentIndex };
		case "toolcall_start": {
			const call = event.partial?.content?.[event.contentIndex] ?? {};
			return { type: "toolcall_start", contentIndex: event.contentIndex, id: call.id, toolName: call.name };
		}
		case "text_delta":
		case "thinking_delta":
		case "toolcall_delta":
			return { type: event.type, contentIndex: event.contentIndex, delta: event.delta };
		case "text_end":
		case "toolcall_end":
			return { type: event.type, contentIndex: event.contentIndex };
		case "thinking_end": {
			const signature = event.partial?.content?.[event.contentIndex]?.thinkingSignature;
			return { type: "thinking_end", contentIndex: event.contentIndex, ...(signature ? { signature } : {}) };
		}
		case "done":
			return { type: "done", reason: event.reason, usage: event.message?.usage };
		case "error":
			return { type: "error", reason: event.reason, errorMessage: event.error?.errorMessage ?? "The provider failed" };
		default:
			return undefined;
	}
}

async function serveStream(message) {
	const abort = new AbortController();
	runningStreams.set(message.id, abort);
	const emit = (event) => send({ type: "stream_event", id: message.id, event });
	try {
		const streamer = providerStreamers.get(message.model?.provider);
		if (!streamer) throw new Error(`no streamSimple for provider ${message.model?.provider}`);
		const { normalizeContext } = await piAi();
		const options = message.options ?? {};
		const stream = streamer(message.model, normalizeContext(message.context ?? { messages: [] }), {
			apiKey: options.apiKey ?? undefined,
			headers: options.headers,
			maxTokens: options.maxTokens,
			sessionId: options.sessionId,
			reasoning: options.thinkingLevel && options.thinkingLevel !== "off" ? options.thinkingLevel : undefined,
			signal: abort.signal,
		});
		for await (const event of stream) {
			if (abort.signal.aborted) return;
			const line = streamEvent(event);
			if (line) emit(line);
			if (event.type === "done" || event.type === "error") return;
		}
		emit({ type: "error", errorMessage: "The provider's stream ended without done or error" });
	} catch (err) {
		if (!abort.signal.aborted) emit({ type: "error", errorMessage: errorText(err) });
	} finally {
		runningStreams.delete(message.id);
	}
}

function bind(runner) {
	// First: bindCore reports the registrations made while loading that fail (a provider, a
	// virtual model) through it.
	runner.onError((err) => reportError(err.extensionPath, err.event, err.error));
	runner.bindCore(
		{
			sendMessage: (message, options) =>
				send({
					type: "send_message",
					customType: message.customType,
					content: message.content,
					display: message.display,
					details: message.details,
					deliverAs: options?.deliverAs,
					triggerTurn: options?.triggerTurn,
				}),
			sendUserMessage: (content, options) =>
				send({ type: "send_user_message", content, deliverAs: options?.deliverAs }),
			appendEntry: (customType, data) => send({ type: "append_entry", customType, data }),
			setSessionName: (name) => {
				state.sessionName = name;
				send({ type: "set_session_name", name });
			},
			getSessionName: () => state.sessionName,
			setLabel: (entryId, label) => send({ type: "set_label", entryId, label: label ?? null }),
			getActiveTools: () => state.activeTools,
			getAllTools: () => state.allTools,
			getSettings: () => structuredClone(state.settings),
			setActiveTools: (names) => {
				state.activeTools = names.filter((n) => state.allTools.some((t) => t.name === n));
				fireAndReport(
					control("set_active_tools", { names }).then((active) => {
						state.activeTools = active;
					}),
					"set_active_tools",
				);
			},
			refreshTools: () => registerLate(runner),
			getCommands: () => state.commands,
			setModel: async (model) => {
				const ok = await control("set_model", { provider: model.provider, modelId: model.id });
				if (ok) await refreshState();
				return ok;
			},
			getThinkingLevel: () => state.thinkingLevel,
			setThinkingLevel: (level) => {
				fireAndReport(
					control("set_thinking_level", { level }).then((effective) => {
						state.thinkingLevel = effective;
					}),
					"set_thinking_level",
				);
			},
		},
		{
			getModel: () => state.model,
			getScopedModels: () => [],
			isIdle: () => state.idle,
			isProjectTrusted: () => state.trusted,
			getSignal: () => state.runAbort?.signal,
			abort: () => fireAndReport(control("abort"), "abort"),
			hasPendingMessages: () => false,
			shutdown: () => send({ type: "shutdown" }),
			getContextUsage: () => state.contextUsage,
			compact: (options) => {
				// The answer says it started; `compaction_end` says how it ended.
				control("compact", { customInstructions: options?.customInstructions }).then(
					() => compactions.push(options ?? {}),
					(err) => options?.onError?.(err instanceof Error ? err : new Error(String(err))),
				);
			},
			getSystemPrompt: () => state.systemPrompt,
			executeTool: (callerId, name, args, options) => executeTool(runner, callerId, name, args, options),
			getCallableTools: () => callableTools(runner),
		},
		{ registerProvider, unregisterProvider, registerVirtualModel, unregisterVirtualModel },
	);
	runner.bindCommandContext({
		waitForIdle: () => control("wait_for_idle"),
		newSession: (options) => control("new_session", { parentSession: options?.parentSession }),
		fork: (entryId) => control("fork", { entryId }),
		navigateTree: (targetId, options) => control("navigate_tree", { targetId, ...options }),
		switchSession: (sessionPath) => control("switch_session", { sessionPath }),
		reload: () => control("reload"),
	});
	runner.setUIContext(uiContext, "rpc");
}

// ---- registration ---------------------------------------------------------------------------------

const HOOKS = new Set([
	"tool_call",
	"tool_result",
	"input",
	"before_agent_start",
	"context",
	"session_before_switch",
	"session_before_fork",
	"session_before_tree",
	"session_before_compact",
	"before_provider_headers",
	"before_provider_request",
	"user_bash",
	"resources_discover",
]);
// Events the host follows for its own state, whether or not an extension listens.
const OWN_EVENTS = [
	"agent_start",
	"agent_end",
	"turn_end",
	"model_select",
	"thinking_level_select",
	"session_start",
	"compaction_end",
	"session_tree",
	"session_compact",
];
/** Events after which the session view is read again. */
const SESSION_CHANGES = new Set(["session_start", "turn_end", "agent_end", "session_tree", "session_compact"]);
/** `ctx.compact()` calls waiting for their `compaction_end`, oldest first. */
const compactions = [];

function toolDecl(tool) {
	const decl = {
		name: tool.name,
		label: tool.label,
		description: tool.description ?? "",
		parameters: JSON.parse(JSON.stringify(tool.parameters ?? { type: "object", properties: {} })),
	};
	if (tool.promptSnippet) decl.promptSnippet = tool.promptSnippet;
	if (Array.isArray(tool.promptGuidelines)) decl.promptGuidelines = tool.promptGuidelines;
	if (tool.executionMode) decl.executionMode = tool.executionMode;
	if (tool.constrainedSampling) decl.constrainedSampling = JSON.parse(JSON.stringify(tool.constrainedSampling));
	return decl;
}

function registration(runner) {
	const handlerNames = new Set();
	for (const ext of runner?.extensions ?? []) for (const name of ext.handlers.keys()) handlerNames.add(name);
	const tools = runner ? runner.getAllRegisteredTools().map((t) => toolDecl(t.definition)) : [];
	const commands = runner
		? runner.getRegisteredCommands().map((c) => ({ name: c.invocationName, description: c.description }))
		: [];
	const flags = runner
		? [...runner.getFlags().values()].map((f) => ({
				name: f.name,
				description: f.description,
				type: f.type,
				default: f.default,
			}))
		: [];
	const hooks = [...handlerNames].filter((n) => HOOKS.has(n));
	const events = [...new Set([...OWN_EVENTS, ...[...handlerNames].filter((n) => !HOOKS.has(n))])];
	const providers = providersAtStart ?? [];
	const line = { type: "register", protocol: 2, name: "typescript", tools, commands, flags, events, hooks, providers };
	if (virtualModelsAtStart?.length) line.virtualModels = virtualModelsAtStart;
	return line;
}

// Tools and commands registered after start-up (pi.registerTool in a handler): v2 late registration.
let registered = { tools: new Map(), commands: new Set() };
let registeredOnce = false;

function remember(runner) {
	const line = registration(runner);
	registered = {
		tools: new Map(line.tools.map((t) => [t.name, JSON.stringify(t)])),
		commands: new Set(line.commands.map((c) => c.name)),
	};
	return line;
}

function registerLate(runner) {
	if (!registeredOnce) return;
	queueMicrotask(() => {
		const line = registration(runner);
		for (const tool of line.tools) {
			if (registered.tools.get(tool.name) !== JSON.stringify(tool)) {
				registered.tools.set(tool.name, JSON.stringify(tool));
				fireAndReport(control("register_tool", { tool }), "register_tool");
			}
		}
		for (const command of line.commands) {
			if (!registered.commands.has(command.name)) {
				registered.commands.add(command.name);
				fireAndReport(control("register_command", { command }), "register_command");
			}
		}
	});
}

// ---- pi-rs → the runner ---------------------------------------------------------------------------

const runningTools = new Map();

async function runTool(runner, message, abort) {
	try {
		const tool = runner?.getToolDefinition(message.toolName);
		if (!tool) throw new Error(`Tool ${message.toolName} not found`);
		const ctx = runner.createToolContext(message.toolCallId, abort.signal);
		const args = tool.prepareArguments ? tool.prepareArguments(message.args) : message.args;
		const onUpdate = (partial) => {
			if (!abort.signal.aborted) send({ type: "tool_update", id: message.id, partialResult: toolResult(partial) });
		};
		const result = await tool.execute(message.toolCallId, args, abort.signal, onUpdate, ctx);
		send({ type: "tool_result", id: message.id, result: toolResult(result) });
	} catch (err) {
		send({ type: "tool_result", id: message.id, error: errorText(err) });
	} finally {
		runningTools.delete(message.id);
	}
}

function toolResult(result) {
	const out = { content: result?.content ?? [], details: result?.details };
	if (result?.isError) out.isError = true;
	if (result?.terminate) out.terminate = true;
	return out;
}

async function runCommand(runner, message) {
	try {
		await refreshSession();
		const command = runner?.getCommand(message.name);
		if (!command) throw new Error(`Command /${message.name} not found`);
		await command.handler(message.args ?? "", runner.createCommandContext());
		send({ type: "command_done", id: message.id });
	} catch (err) {
		send({ type: "command_done", id: message.id, error: errorText(err) });
	}
}

const changed = (a, b) => JSON.stringify(a) !== JSON.stringify(b);

async function beforeAgentStart(runner, payload) {
	const ctx = runner.createContext();
	let systemPrompt = payload.systemPrompt;
	// pi's extensions change the options in place; later handlers see the changes.
	const options = payload.systemPromptOptions ? structuredClone(payload.systemPromptOptions) : undefined;
	const result = {};
	const messages = [];
	for (const ext of runner.extensions) {
		for (const handler of ext.handlers.get("before_agent_start") ?? []) {
			try {
				const event = {
					type: "before_agent_start",
					prompt: payload.prompt,
					images: payload.images,
					systemPrompt,
					systemPromptOptions: options,
				};
				const answer = await handler(event, ctx);
				if (answer?.message) messages.push(answer.message);
				if (typeof answer?.systemPrompt === "string") {
					systemPrompt = answer.systemPrompt;
					result.systemPrompt = systemPrompt;
				}
			} catch (err) {
				reportError(ext.path, "before_agent_start", errorText(err));
			}
		}
	}
	if (options && changed(options, payload.systemPromptOptions)) result.systemPromptOptions = options;
	// The protocol carries one injected message per answer; several are joined in order.
	if (messages.length === 1) result.message = messages[0];
	if (messages.length > 1) {
		result.message = {
			...messages[0],
			content: messages.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))).join("\n\n"),
		};
	}
	return result;
}

async function hook(runner, name, payload) {
	switch (name) {
		case "tool_call": {
			const event = { type: "tool_call", toolCallId: payload.toolCallId, toolName: payload.toolName, input: structuredClone(payload.input) };
			const answer = (await runner.emitToolCall(event)) ?? {};
			const result = {};
			if (answer.block) {
				result.block = true;
				if (answer.reason !== undefined) result.reason = answer.reason;
				if (answer.terminate) result.terminate = true;
			}
			if (changed(event.input, payload.input)) result.input = event.input;
			return result;
		}
		case "tool_result": {
			const answer = await runner.emitToolResult({ type: "tool_result", ...payload });
			if (!answer) return {};
			return { content: answer.content, details: answer.details, isError: answer.isError };
		}
		case "input": {
			const answer = await runner.emitInput(payload.text, payload.images, payload.source);
			return answer ?? {};
		}
		case "before_agent_start":
			return beforeAgentStart(runner, payload);
		case "context": {
			const messages = await runner.emitContext(payload.messages);
			return changed(messages, payload.messages) ? { messages } : {};
		}
		case "before_provider_request": {
			const body = await runner.emitBeforeProviderRequest(payload.payload);
			return changed(body, payload.payload) ? { payload: body } : {};
		}
		case "before_provider_headers": {
			const headers = { ...payload.headers };
			const after = await runner.emitBeforeProviderHeaders(headers);
			const diff = {};
			for (const [key, value] of Object.entries(after)) if (payload.headers[key] !== value) diff[key] = value;
			for (const key of Object.keys(payload.headers)) if (!(key in after)) diff[key] = null;
			return Object.keys(diff).length > 0 ? { headers: diff } : {};
		}
		case "user_bash":
			return (await runner.emitUserBash({ type: "user_bash", ...payload })) ?? {};
		case "resources_discover": {
			const found = await runner.emitResourcesDiscover(payload.cwd, payload.reason);
			return {
				skillPaths: found.skillPaths.map((p) => p.path),
				promptPaths: found.promptPaths.map((p) => p.path),
				themePaths: found.themePaths.map((p) => p.path),
			};
		}
		default:
			return (await runner.emit({ type: name, ...payload })) ?? {};
	}
}

async function onEvent(runner, event) {
	switch (event.type) {
		case "agent_start":
			state.idle = false;
			state.runAbort = new AbortController();
			break;
		case "agent_end":
			state.idle = true;
			state.runAbort = undefined;
			break;
		case "thinking_level_select":
			state.thinkingLevel = event.level;
			break;
		case "compaction_end": {
			const waiting = compactions.shift();
			if (event.result) waiting?.onComplete?.(event.result);
			else waiting?.onError?.(new Error(event.errorMessage ?? (event.aborted ? "Compaction cancelled" : "Compaction failed")));
			break;
		}
	}
	if (event.type === "agent_end" || event.type === "turn_end" || event.type === "model_select") {
		await refreshState();
	}
	if (SESSION_CHANGES.has(event.type)) await refreshSession();
	if (runner?.hasHandlers(event.type)) await runner.emit(event);
}

// ---- the line loop --------------------------------------------------------------------------------

async function main() {
	const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
	let runner;
	let events = Promise.resolve();
	let resolveReady;
	const ready = new Promise((resolve) => {
		resolveReady = resolve;
	});
	const handle = async (message) => {
		switch (message.type) {
			case "action_update":
				pendingRequests.get(message.id)?.onUpdate?.(message.partialResult);
				return;
			case "query_result":
			case "action_result": {
				const pending = pendingRequests.get(message.id);
				if (!pending) return;
				pendingRequests.delete(message.id);
				if (message.error !== undefined) pending.reject(new Error(message.error));
				else pending.resolve(message.result);
				return;
			}
			case "ui_response": {
				const answer = pendingDialogs.get(message.id);
				pendingDialogs.delete(message.id);
				answer?.(message);
				return;
			}
			case "cancel_tool":
				runningTools.get(message.id)?.abort();
				return;
			case "cancel_stream":
				runningStreams.get(message.id)?.abort();
				return;
			case "stream_request":
				await ready;
				return serveStream(message);
			// Not after `ready`: pi-rs asks for the register line's providers right after it.
			case "refresh_models":
				return serveRefresh(message);
			case "oauth_refresh":
				await ready;
				return serveOauthRefresh(message);
			case "oauth_api_key":
				await ready;
				return serveOauthCall(message);
			// As `refresh_models`: asked right after the `register` line.
			case "oauth_modify_models":
				return serveOauthCall(message);
			case "route":
				await ready;
				return serveRoute(message);
		}
		// A cancel may come while the run still waits for earlier events.
		const abort = message.type === "run_tool" ? new AbortController() : undefined;
		if (abort) runningTools.set(message.id, abort);
		await ready;
		// Events are handled one after another, in order (pi awaits each before going on);
		// tools, commands and hooks start once the events that came before them are handled.
		if (message.type === "event") {
			if (message.event?.type === "session_shutdown") stopping = true;
			events = events.then(() => onEvent(runner, message.event)).catch((err) =>
				reportError("<runtime>", message.event?.type ?? "event", errorText(err)),
			);
			return;
		}
		await events;
		switch (message.type) {
			case "run_tool":
				return runTool(runner, message, abort);
			case "run_command":
				return runCommand(runner, message);
			case "hook":
				try {
					const result = runner ? await hook(runner, message.hook, message.payload ?? {}) : {};
					send({ type: "hook_result", id: message.id, result });
				} catch (err) {
					send({ type: "hook_result", id: message.id, error: errorText(err) });
				}
				return;
		}
	};
	lines.on("line", (line) => {
		if (!line.trim()) return;
		let message;
		try {
			message = JSON.parse(line);
		} catch {
			return;
		}
		if (message.type === "hello") {
			state.hello = message;
			start(message).then(
				(loaded) => {
					runner = loaded;
					resolveReady();
				},
				(err) => {
					reportError("<runtime>", "load", errorText(err));
					resolveReady();
				},
			);
			return;
		}
		handle(message).catch((err) => reportError("<runtime>", message.type, errorText(err)));
	});
	lines.on("close", () => {
		for (const abort of runningTools.values()) abort.abort();
		process.exit(0);
	});
}

async function start(hello) {
	const runner = await load(hello.cwd);
	send(remember(runner));
	registeredOnce = true;
	providersAtStart = undefined;
	virtualModelsAtStart = undefined;
	for (const line of beforeRegister) send(line);
	beforeRegister = undefined;
	if (!runner) return undefined;
	const [flags, trust] = await Promise.all([query("flags").catch(() => ({})), query("trust").catch(() => undefined)]);
	for (const [name, value] of Object.entries(flags ?? {})) runner.setFlagValue(name, value);
	state.trusted = trust?.trusted === true;
	await Promise.all([refreshState(), refreshSession(), refreshModels().catch(() => undefined)]);
	return runner;
}

main();
