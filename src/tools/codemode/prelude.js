// The codemode script's world, evaluated in a fresh QuickJS context before the script.
//
// Evaluates to `(bridge, toolsJson, globalsJson, storeJson) => ({ settle, run, stalled })`.
// Everything crosses the bridge as strings: `bridge("call"|"global", id, name, argsJson)`,
// `bridge("output", "text"|"console", text)`, `bridge("output", "image", base64, mimeType)`,
// `bridge("done", "ok", valueJson, writesJson)`, `bridge("done", "error", errorJson)`.
// The host (src/codemode/engine.rs) never trusts what arrives: it parses and checks it.
// Texts the model reads (errors, limits) are pi 1.6.0's.
(function (bridge, toolsJson, globalsJson, storeJson) {
	"use strict";
	const toJson = JSON.stringify;
	const fromJson = JSON.parse;
	const then = Promise.prototype.then;
	const ErrorType = Error;
	const TypeErrorType = TypeError;
	const RangeErrorType = RangeError;
	const defineGlobal = (name, value) => Object.defineProperty(globalThis, name, { value, enumerable: true });
	const MAX_OUTPUT_CHARS = 16777216;
	const MAX_OUTPUT_ITEMS = 100000;
	const MAX_STORE_VALUE = 262144;
	const MAX_STORE_TOTAL = 1048576;

	let settled = false;
	const waiting = new Map();
	let lastId = 0;
	// exit() unwinds the script with this token after reporting success.
	const EXIT_TOKEN = Object.freeze({ exit: true });

	function report(ok, first, second) {
		if (settled) return;
		settled = true;
		if (ok) bridge("done", "ok", first, second);
		else bridge("done", "error", first);
	}

	function errorLines(error) {
		const head = error.message ? String(error.name) + ": " + String(error.message) : String(error.name);
		const frames = typeof error.stack === "string" ? error.stack.split("\n").filter((l) => l.trim() !== "") : [];
		return [head].concat(frames).join("\n");
	}

	function show(value) {
		if (typeof value === "string") return value;
		if (value instanceof ErrorType) return errorLines(value);
		if (typeof value === "number") return String(value);
		try {
			const json = toJson(value);
			return json === undefined ? String(value) : json;
		} catch (_) {
			return String(value);
		}
	}

	function errorJson(error) {
		try {
			if (error instanceof ErrorType) {
				return toJson({ name: String(error.name), message: String(error.message), stack: errorLines(error) });
			}
			return toJson({ message: String(show(error)) });
		} catch (_) {
			return toJson({ message: "The script threw a value that cannot be described" });
		}
	}

	function requester(kind, name, spread) {
		return function (...args) {
			return new Promise((resolve, reject) => {
				let json;
				try {
					const payload = spread ? args : args[0];
					json = payload === undefined ? undefined : toJson(payload);
				} catch (error) {
					reject(error);
					return;
				}
				lastId += 1;
				waiting.set(lastId, { resolve, reject });
				bridge(kind, String(lastId), name, json);
			});
		};
	}

	// tools.<jsName> and tools["raw name"]; a missing member throws naming close matches.
	const toolTable = Object.create(null);
	const listing = [];
	for (const tool of fromJson(toolsJson)) {
		const call = requester("call", tool.name, false);
		if (!(tool.jsName in toolTable)) {
			toolTable[tool.jsName] = call;
			listing.push(Object.freeze({ name: tool.jsName, description: tool.description }));
		}
		if (!(tool.name in toolTable)) toolTable[tool.name] = call;
	}
	Object.freeze(toolTable);
	Object.freeze(listing);
	const squash = (name) => name.toLowerCase().replace(/[^a-z0-9]/g, "");
	function strict(target, label, names, hint) {
		return new Proxy(target, {
			get(object, key, receiver) {
				if (typeof key !== "string" || key in object || key in Object.prototype || key === "then" || key === "toJSON") {
					return Reflect.get(object, key, receiver);
				}
				const wanted = squash(key);
				let near = names.filter((n) => squash(n) === wanted);
				if (near.length === 0 && wanted !== "") {
					near = names.filter((n) => squash(n).includes(wanted) || wanted.includes(squash(n)));
				}
				let message = label + "." + key + " does not exist.";
				if (near.length > 0) message += " Did you mean " + near.slice(0, 5).map((n) => label + "." + n).join(", ") + "?";
				else if (names.length <= 20) message += " Available: " + names.join(", ") + ".";
				if (hint) message += " " + hint;
				message += ' Check for a member with "' + key + '" in ' + label + ".";
				throw new TypeErrorType(message);
			},
		});
	}
	const tools = strict(
		toolTable,
		"tools",
		listing.map((t) => t.name),
		"ALL_TOOLS lists every tool; searchTools(query) finds tools by topic.",
	);

	// Host globals: `name` or `space.member`, arguments spread into a JSON array.
	const spaces = new Map();
	for (const name of fromJson(globalsJson)) {
		const call = requester("global", name, true);
		const dot = name.indexOf(".");
		if (dot < 0) {
			defineGlobal(name, call);
		} else {
			const space = name.slice(0, dot);
			if (!spaces.has(space)) spaces.set(space, Object.create(null));
			spaces.get(space)[name.slice(dot + 1)] = call;
		}
	}
	for (const [space, members] of spaces) {
		defineGlobal(space, strict(Object.freeze(members), space, Object.keys(members)));
	}

	// store/load over a snapshot of JSON texts; the keys written go back with a successful end.
	const stored = new Map(Object.entries(fromJson(storeJson)));
	const written = new Map();
	let storedSize = 0;
	for (const [key, json] of stored) storedSize += key.length + json.length;
	const STORE_ADVICE =
		"store() is for small state such as IDs or summaries. Show images with image(), keep large data in variables, or write it to a file with a tool.";
	function needKey(fn, key) {
		if (typeof key !== "string") throw new TypeErrorType(fn + "() key must be a string");
	}
	defineGlobal("store", function store(key, value) {
		needKey("store", key);
		const before = stored.has(key) ? key.length + stored.get(key).length : 0;
		if (value === undefined) {
			stored.delete(key);
			storedSize -= before;
			written.set(key, undefined);
			return;
		}
		let json;
		try {
			json = toJson(value);
		} catch (error) {
			throw new TypeErrorType("store(" + toJson(key) + ") value is not JSON-serializable: " + show(error));
		}
		if (json === undefined) throw new TypeErrorType("store(" + toJson(key) + ") value is not JSON-serializable");
		if (json.length > MAX_STORE_VALUE) {
			throw new RangeErrorType(
				"store(" + toJson(key) + ") value has " + json.length + " characters of JSON, more than the limit of " +
					MAX_STORE_VALUE + ". " + STORE_ADVICE,
			);
		}
		const after = storedSize - before + key.length + json.length;
		if (after > MAX_STORE_TOTAL) {
			throw new RangeErrorType(
				"store is full: stored values would exceed " + MAX_STORE_TOTAL +
					" characters of JSON. Delete keys with store(key, undefined). " + STORE_ADVICE,
			);
		}
		stored.set(key, json);
		storedSize = after;
		written.set(key, json);
	});
	defineGlobal("load", function load(key) {
		needKey("load", key);
		const json = stored.get(key);
		return json === undefined ? undefined : fromJson(json);
	});
	function writesJson() {
		const list = [];
		for (const [key, json] of written) list.push(json === undefined ? [key] : [key, json]);
		return toJson(list);
	}

	// Output, with pi's limits: past them the script fails (catching the error does not help).
	let outChars = 0;
	let outItems = 0;
	function emit(kind, data, mimeType) {
		if (settled) return;
		outChars += data.length;
		outItems += 1;
		if (outChars > MAX_OUTPUT_CHARS || outItems > MAX_OUTPUT_ITEMS) {
			const error = new RangeErrorType(
				"script output exceeded the limit of " + MAX_OUTPUT_CHARS + " characters or " + MAX_OUTPUT_ITEMS +
					" text(), image(), and console calls. Print a summary instead, or write large data to a file with a tool.",
			);
			report(false, errorJson(error));
			throw error;
		}
		if (mimeType === undefined) bridge("output", kind, data);
		else bridge("output", kind, data, mimeType);
	}
	defineGlobal("text", function text(value) {
		let rendered;
		try {
			if (value === null || value === undefined || (typeof value !== "object" && typeof value !== "function")) {
				rendered = String(value);
			} else {
				const json = toJson(value);
				rendered = json === undefined ? String(value) : json;
			}
		} catch (error) {
			throw new TypeErrorType(error instanceof ErrorType ? error.message : String(error));
		}
		emit("text", rendered);
	});

	const IMAGE_EXPECTS =
		'image expects a non-empty image URL string, an object with image_url, or an image block { type: "image", data, mimeType }';
	function imageSource(value) {
		if (typeof value === "string") return value;
		if (typeof value !== "object" || value === null || Array.isArray(value)) throw new TypeErrorType(IMAGE_EXPECTS);
		if (value.image_url !== undefined) {
			if (typeof value.image_url !== "string") throw new TypeErrorType(IMAGE_EXPECTS);
			return value.image_url;
		}
		if (typeof value.type !== "string") throw new TypeErrorType(IMAGE_EXPECTS);
		if (value.type !== "image") throw new TypeErrorType('image only accepts image blocks, got "' + value.type + '"');
		if (typeof value.data !== "string" || value.data === "") throw new TypeErrorType("image expected image block data");
		return value.data.toLowerCase().startsWith("data:") ? value.data : "data:;base64," + value.data;
	}
	const KINDS = [
		["image/png", /^iVBORw0KGg/],
		["image/jpeg", /^[/]9j[/](?!9)/],
		["image/gif", /^R0lGOD[dl]h/],
		["image/webp", /^UklG.{8}RUJQ/],
	];
	defineGlobal("image", function image(value) {
		const url = imageSource(value);
		if (url === "") throw new TypeErrorType(IMAGE_EXPECTS);
		const colon = url.indexOf(":");
		const scheme = colon < 0 ? "" : url.slice(0, colon).toLowerCase();
		if (scheme === "http" || scheme === "https") {
			throw new TypeErrorType("remote image URLs are not supported in tool outputs. Pass a base64 data URI instead");
		}
		const comma = url.indexOf(",");
		const params = comma < 0 ? [] : url.slice(colon + 1, comma).split(";").slice(1);
		if (scheme !== "data" || comma < 0 || !params.some((p) => p.toLowerCase() === "base64")) {
			throw new TypeErrorType("invalid image output. Pass a base64 data URI instead");
		}
		const data = url.slice(comma + 1).replace(/\s+/g, "");
		if (data.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(data)) {
			throw new TypeErrorType("invalid image output. The image data is not valid base64 (truncated or corrupted?)");
		}
		const kind = KINDS.find((entry) => entry[1].test(data.slice(0, 16)));
		if (!kind) throw new TypeErrorType("invalid image output. The image data is not a PNG, JPEG, GIF, or WebP image");
		emit("image", data, kind[0]);
	});

	defineGlobal("exit", function exit() {
		let writes;
		try {
			writes = writesJson();
		} catch (error) {
			report(false, errorJson(error));
			throw EXIT_TOKEN;
		}
		report(true, undefined, writes);
		throw EXIT_TOKEN;
	});

	const consoleObject = {};
	for (const level of ["log", "info", "warn", "error", "debug"]) {
		consoleObject[level] = (...args) => emit("console", args.map(show).join(" "));
	}
	Object.freeze(consoleObject);
	defineGlobal("console", consoleObject);
	defineGlobal("tools", tools);
	defineGlobal("ALL_TOOLS", listing);

	return {
		settle(idText, ok, payload) {
			const id = Number(idText);
			const entry = waiting.get(id);
			if (!entry) return;
			waiting.delete(id);
			if (!ok) {
				entry.reject(new ErrorType(payload));
				return;
			}
			let value;
			try {
				value = payload === undefined ? undefined : fromJson(payload);
			} catch (error) {
				entry.reject(error);
				return;
			}
			entry.resolve(value);
		},
		run(body) {
			let promise;
			try {
				promise = body(tools, consoleObject);
			} catch (error) {
				report(false, errorJson(error));
				return;
			}
			then.call(
				promise,
				(value) => {
					let json;
					try {
						json = value === undefined ? undefined : toJson(value);
					} catch (error) {
						report(false, errorJson(error));
						return;
					}
					report(true, json, writesJson());
				},
				(error) => {
					if (error === EXIT_TOKEN) return;
					report(false, errorJson(error));
				},
			);
		},
		stalled() {
			if (settled || waiting.size > 0) return false;
			report(
				false,
				toJson({
					name: "Error",
					message:
						"The script is waiting on a promise that can never settle: no tool call is pending, and timers do not exist here.",
				}),
			);
			return true;
		},
	};
})
