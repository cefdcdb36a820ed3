//! settings.json: the global file `<agentDir>/settings.json` and the project file
//! `<cwd>/.pi/settings.json`, merged one level deep (project wins; nested objects are merged key
//! by key, arrays and scalars replaced), with pi's legacy-key migrations applied on load.
//!
//! Writes go to the GLOBAL file only and only carry what this process changed: the current file is
//! re-read, the modified top-level keys (or the modified keys inside a nested object) are merged
//! into it, and the result is pretty-printed with 2 spaces and written through a temp file in the
//! same directory plus a rename. A global file that failed to parse at startup is never written;
//! one that fails to parse at write time is left alone and reported. The write takes the same
//! `<file>.lock` directory lock the reference takes (bounded retries), so two processes do not
//! interleave their read-merge-write cycles.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

/// One level of merging: nested objects on both sides are combined key by key.
pub fn merge_settings(
    base: &Map<String, Value>,
    overrides: &Map<String, Value>,
) -> Map<String, Value> {
    let mut result = base.clone();
    for (key, value) in overrides {
        match (result.get(key), value) {
            (Some(Value::Object(base_obj)), Value::Object(over_obj)) => {
                let mut merged = base_obj.clone();
                for (k, v) in over_obj {
                    merged.insert(k.clone(), v.clone());
                }
                result.insert(key.clone(), Value::Object(merged));
            }
            _ => {
                result.insert(key.clone(), value.clone());
            }
        }
    }
    result
}

/// The legacy rewrites pi applies to every loaded settings object.
pub fn migrate_settings(settings: &mut Map<String, Value>) {
    if settings.contains_key("queueMode")
        && !settings.contains_key("steeringMode")
        && let Some(mode) = settings.shift_remove("queueMode")
    {
        settings.insert("steeringMode".into(), mode);
    }
    if !settings.contains_key("transport")
        && let Some(Value::Bool(ws)) = settings.get("websockets")
    {
        let transport = if *ws { "websocket" } else { "sse" };
        settings.insert("transport".into(), Value::String(transport.into()));
        settings.shift_remove("websockets");
    }
    if let Some(Value::Object(skills)) = settings.get("skills").cloned() {
        if let Some(enable) = skills.get("enableSkillCommands")
            && !settings.contains_key("enableSkillCommands")
        {
            settings.insert("enableSkillCommands".into(), enable.clone());
        }
        match skills.get("customDirectories") {
            Some(Value::Array(dirs)) if !dirs.is_empty() => {
                settings.insert("skills".into(), Value::Array(dirs.clone()));
            }
            _ => {
                settings.shift_remove("skills");
            }
        }
    }
    if let Some(Value::Object(retry)) = settings.get_mut("retry")
        && let Some(max_delay) = retry.get("maxDelayMs").cloned()
    {
        let provider_has_value = retry
            .get("provider")
            .and_then(|p| p.get("maxRetryDelayMs"))
            .is_some_and(|v| !v.is_null());
        if max_delay.is_number() && !provider_has_value {
            let mut provider = match retry.get("provider") {
                Some(Value::Object(p)) => p.clone(),
                _ => Map::new(),
            };
            provider.insert("maxRetryDelayMs".into(), max_delay);
            retry.insert("provider".into(), Value::Object(provider));
        }
        retry.shift_remove("maxDelayMs");
    }
}

/// Parses a settings file's text: empty text is an empty object; anything else must be a JSON
/// object. Migrations are applied.
pub fn parse_settings_text(text: &str) -> Result<Map<String, Value>, String> {
    if text.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut map)) => {
            migrate_settings(&mut map);
            Ok(map)
        }
        Ok(_) => Err("settings file must contain a JSON object".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads a settings file; a missing file is an empty object.
pub(crate) fn load_file(path: &Path) -> Result<Map<String, Value>, String> {
    match fs::read(path) {
        Ok(bytes) => parse_settings_text(&String::from_utf8_lossy(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
        Err(e) => Err(e.to_string()),
    }
}

/// A setting changed by this process: a top-level key, or one key inside a nested object.
#[derive(Clone, Debug, PartialEq)]
struct Modified {
    field: String,
    nested: Option<String>,
    /// The latest save that carries it; dropped once that save is confirmed.
    save: u64,
}

/// Largest token count a setting may name (`compaction.*`, `thinkingBudgets.*`): 100 M tokens.
pub(super) const MAX_TOKENS_SETTING: u64 = 100_000_000;
/// Largest delay or timeout a setting may name, in milliseconds: a day (`deadline::MAX_WAIT`).
const MAX_DELAY_MS_SETTING: u64 = 86_400_000;

/// Numeric settings and their bounds; larger values are clamped with a warning at load.
const NUMERIC_BOUNDS: &[(&str, u64)] = &[
    ("compaction.reserveTokens", MAX_TOKENS_SETTING),
    ("compaction.keepRecentTokens", MAX_TOKENS_SETTING),
    ("retry.maxRetries", 100),
    ("retry.baseDelayMs", MAX_DELAY_MS_SETTING),
    ("retry.provider.maxRetries", 100),
    ("retry.provider.maxRetryDelayMs", MAX_DELAY_MS_SETTING),
    ("retry.provider.timeoutMs", MAX_DELAY_MS_SETTING),
];

fn numeric_bound(dotted_path: &str) -> Option<u64> {
    if dotted_path.starts_with("thinkingBudgets.") {
        return Some(MAX_TOKENS_SETTING);
    }
    NUMERIC_BOUNDS
        .iter()
        .find(|(path, _)| *path == dotted_path)
        .map(|(_, max)| *max)
}

pub struct Settings {
    global_path: PathBuf,
    global: Map<String, Value>,
    project: Map<String, Value>,
    merged: Map<String, Value>,
    global_load_failed: bool,
    modified: Vec<Modified>,
    saves_queued: u64,
    /// The latest save the disk-sync thread completed.
    saved: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Settings {
    /// Loads the global file and, when `project_cwd` is given (the project is trusted), the
    /// project file. Returns load problems as `(scope, message)` pairs; a broken file counts as
    /// empty.
    pub fn load(
        agent_dir: &Path,
        project_cwd: Option<&Path>,
    ) -> (Settings, Vec<(&'static str, String)>) {
        let global_path = agent_dir.join("settings.json");
        let mut errors = Vec::new();
        let global = load_file(&global_path).unwrap_or_else(|e| {
            errors.push(("global", e));
            Map::new()
        });
        let global_load_failed = !errors.is_empty();
        let project = match project_cwd {
            Some(cwd) => load_file(&cwd.join(".pi").join("settings.json")).unwrap_or_else(|e| {
                errors.push(("project", e));
                Map::new()
            }),
            None => Map::new(),
        };
        let merged = merge_settings(&global, &project);
        let settings = Settings {
            global_path,
            global,
            project,
            merged,
            global_load_failed,
            modified: Vec::new(),
            saves_queued: 0,
            saved: Default::default(),
        };
        (settings, errors)
    }

    /// Reads both files again, after the writes queued so far (bounded wait). `keep_broken`: a
    /// file that does not parse keeps what was read before (pi 1.6.0's `SettingsManager.reload`,
    /// an extension's `reload`); otherwise it counts as empty (the new `SettingsManager` of its
    /// session change). Either way it is reported, and a global file that does not parse is not
    /// written to. What this process changed is in the file now: nothing stays marked modified.
    pub fn reload(
        &mut self,
        project_cwd: Option<&Path>,
        keep_broken: bool,
    ) -> Vec<(&'static str, String)> {
        if !crate::disk::flush(Duration::from_secs(2)) {
            log::warn!("settings: a queued write is not done; reading the files as they are");
        }
        let mut errors = Vec::new();
        match load_file(&self.global_path) {
            Ok(global) => {
                self.global = global;
                self.global_load_failed = false;
            }
            Err(e) => {
                errors.push(("global", e));
                self.global_load_failed = true;
                if !keep_broken {
                    self.global = Map::new();
                }
            }
        }
        match project_cwd {
            Some(cwd) => match load_file(&cwd.join(".pi").join("settings.json")) {
                Ok(project) => self.project = project,
                Err(e) => {
                    errors.push(("project", e));
                    if !keep_broken {
                        self.project = Map::new();
                    }
                }
            },
            None => self.project = Map::new(),
        }
        self.modified.clear();
        self.merged = merge_settings(&self.global, &self.project);
        errors
    }

    /// Every merged setting (global, then the trusted project's on top).
    pub fn merged(&self) -> &Map<String, Value> {
        &self.merged
    }

    /// The merged value at a dotted path, e.g. `retry.provider.maxRetryDelayMs`.
    pub fn get(&self, dotted_path: &str) -> Option<&Value> {
        let mut parts = dotted_path.split('.');
        let mut current = self.merged.get(parts.next()?)?;
        for part in parts {
            current = current.as_object()?.get(part)?;
        }
        Some(current)
    }

    /// A string list of one scope's file (`skills`, `prompts`, `extensions`: each scope's paths
    /// resolve against its own directory, so they are not merged).
    pub fn scoped_list(&self, project: bool, key: &str) -> Vec<String> {
        let map = if project { &self.project } else { &self.global };
        map.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A top-level value of one scope's file (the sandbox merges scopes by its own rules).
    pub fn scoped_value(&self, project: bool, key: &str) -> Option<&Value> {
        let map = if project { &self.project } else { &self.global };
        map.get(key)
    }

    pub fn get_str(&self, dotted_path: &str) -> Option<&str> {
        self.get(dotted_path)?.as_str()
    }

    pub fn get_bool(&self, dotted_path: &str) -> Option<bool> {
        self.get(dotted_path)?.as_bool()
    }

    /// A whole number setting: negative, fractional-infinite or non-numeric values read as unset,
    /// and a known setting is clamped to its bound (`NUMERIC_BOUNDS`); `numeric_warnings` says so
    /// once at load.
    pub fn get_u64(&self, dotted_path: &str) -> Option<u64> {
        let value = self.get(dotted_path)?;
        let number = value.as_u64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        })?;
        Some(number.min(numeric_bound(dotted_path).unwrap_or(u64::MAX)))
    }

    /// One warning per numeric setting that is not a usable number or exceeds its bound (a
    /// repository's `.pi/settings.json` may hold anything; it never crashes pi-rs).
    pub fn numeric_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut check = |path: &str, max: u64| {
            let Some(value) = self.get(path) else {
                return;
            };
            match value.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => {
                    if f > max as f64 {
                        warnings.push(format!(
                            "settings: {path} {value} is too large; using {max}"
                        ));
                    }
                }
                _ => warnings.push(format!(
                    "settings: {path} must be a non-negative number; ignoring {value}"
                )),
            }
        };
        for (path, max) in NUMERIC_BOUNDS {
            check(path, *max);
        }
        if let Some(Value::Object(budgets)) = self.get("thinkingBudgets") {
            for level in budgets.keys() {
                check(&format!("thinkingBudgets.{level}"), MAX_TOKENS_SETTING);
            }
        }
        warnings
    }

    /// Sets a top-level global key and persists it.
    pub fn set_top(&mut self, field: &str, value: Value) {
        self.global.insert(field.to_string(), value);
        self.mark(field, None);
        self.save()
    }

    /// Sets `field.nested` in the global settings (creating the object) and persists it.
    pub fn set_nested(&mut self, field: &str, nested: &str, value: Value) {
        let entry = self
            .global
            .entry(field.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(obj) = entry {
            obj.insert(nested.to_string(), value);
        }
        self.mark(field, Some(nested));
        self.save()
    }

    fn mark(&mut self, field: &str, nested: Option<&str>) {
        // u64::MAX: in no save yet, so kept until one that carries its new value is confirmed.
        match self
            .modified
            .iter_mut()
            .find(|m| m.field == field && m.nested.as_deref() == nested)
        {
            Some(known) => known.save = u64::MAX,
            None => self.modified.push(Modified {
                field: field.to_string(),
                nested: nested.map(str::to_string),
                save: u64::MAX,
            }),
        }
    }

    /// Recomputes the merged view and queues a write of the modified keys to the global file on
    /// the disk-writer thread: the agent never waits for it, and the command's response (sent
    /// after this) reaches stdout only once the file is written. A failed write is reported
    /// there; its keys stay modified, so the next save carries them again.
    fn save(&mut self) {
        self.merged = merge_settings(&self.global, &self.project);
        if self.global_load_failed {
            // The reference never overwrites a file it could not read.
            return;
        }
        let confirmed = self.saved.load(std::sync::atomic::Ordering::SeqCst);
        self.modified.retain(|m| m.save > confirmed);
        self.saves_queued += 1;
        let number = self.saves_queued;
        for m in &mut self.modified {
            m.save = number;
        }
        let (path, modified, global) = (
            self.global_path.clone(),
            self.modified.clone(),
            self.global.clone(),
        );
        let saved = std::sync::Arc::clone(&self.saved);
        crate::disk::write(move || match write_modified(&path, &modified, &global) {
            Ok(()) => {
                saved.fetch_max(number, std::sync::atomic::Ordering::SeqCst);
            }
            Err(e) => log::warn!("settings not saved: {e}"),
        });
    }
}

/// Re-reads the global file and writes it back with `modified` keys taken from `global`.
fn write_modified(
    path: &Path,
    modified: &[Modified],
    global: &Map<String, Value>,
) -> Result<(), String> {
    {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let _lock = FileLock::acquire(path)?;
        let current = match fs::read(path) {
            Ok(bytes) => parse_settings_text(&String::from_utf8_lossy(&bytes))
                .map_err(|e| format!("not writing {}: it does not parse ({e})", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let mut merged = current.clone();
        let fields: Vec<&str> = {
            let mut seen: Vec<&str> = Vec::new();
            for m in modified {
                if !seen.contains(&m.field.as_str()) {
                    seen.push(&m.field);
                }
            }
            seen
        };
        for field in fields {
            let value = global.get(field);
            let nested_keys: Vec<&str> = modified
                .iter()
                .filter(|m| m.field == field)
                .filter_map(|m| m.nested.as_deref())
                .collect();
            match value {
                Some(Value::Object(in_memory)) if !nested_keys.is_empty() => {
                    let mut nested = match current.get(field) {
                        Some(Value::Object(obj)) => obj.clone(),
                        _ => Map::new(),
                    };
                    for key in nested_keys {
                        match in_memory.get(key) {
                            Some(v) => {
                                nested.insert(key.to_string(), v.clone());
                            }
                            None => {
                                nested.shift_remove(key);
                            }
                        }
                    }
                    merged.insert(field.to_string(), Value::Object(nested));
                }
                Some(v) => {
                    merged.insert(field.to_string(), v.clone());
                }
                None => {
                    merged.shift_remove(field);
                }
            }
        }
        let text = serde_json::to_string_pretty(&Value::Object(merged))
            .map_err(|e| format!("cannot serialize settings: {e}"))?;
        write_atomically(path, text.as_bytes())
    }
}

/// Sets one top-level key of a settings file (the user's or a project's) and writes it at once,
/// under the file lock, keeping the other keys as the file has them now: the package commands,
/// which run outside a session. A file that does not parse is not overwritten.
pub fn write_key_now(path: &Path, key: &str, value: Value) -> Result<(), String> {
    let mut values = Map::new();
    values.insert(key.to_string(), value);
    let modified = [Modified {
        field: key.to_string(),
        nested: None,
        save: 0,
    }];
    write_modified(path, &modified, &values)
}

/// Replaces `path` with `bytes` atomically (`disk::replace_file`: a symlink is written through,
/// the mode and owner are kept).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    crate::disk::replace_file(path, bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The `<file>.lock` directory lock used by the reference (proper-lockfile): mkdir to take it,
/// rmdir to release. A lock older than 10 s is considered abandoned.
pub(crate) struct FileLock {
    dir: PathBuf,
}

impl FileLock {
    pub(crate) fn acquire(path: &Path) -> Result<FileLock, String> {
        let mut dir = path.as_os_str().to_owned();
        dir.push(".lock");
        let dir = PathBuf::from(dir);
        for _attempt in 0..10 {
            match fs::create_dir(&dir) {
                Ok(()) => return Ok(FileLock { dir }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = fs::metadata(&dir)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .is_some_and(|age| age > Duration::from_secs(10));
                    if stale {
                        let _ = fs::remove_dir(&dir);
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("cannot lock {}: {e}", path.display())),
            }
        }
        Err(format!(
            "cannot lock {}: held by another process",
            path.display()
        ))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;
    use serde_json::json;

    /// Waits until the disk-sync thread wrote what was queued.
    fn settled() {
        assert!(crate::disk::flush(std::time::Duration::from_secs(10)));
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn merge_is_one_level_deep() {
        let global = obj(
            json!({"a": 1, "retry": {"enabled": false, "maxRetries": 5, "provider": {"x": 1}}, "list": [1]}),
        );
        let project =
            obj(json!({"retry": {"maxRetries": 7, "provider": {"y": 2}}, "list": [2], "b": true}));
        let merged = merge_settings(&global, &project);
        assert_eq!(
            Value::Object(merged),
            json!({"a": 1, "retry": {"enabled": false, "maxRetries": 7, "provider": {"y": 2}}, "list": [2], "b": true})
        );
    }

    #[test]
    fn migrations_rename_legacy_keys() {
        let mut s = obj(
            json!({"queueMode": "all", "retry": {"maxDelayMs": 5000, "enabled": true}, "websockets": true}),
        );
        migrate_settings(&mut s);
        assert_eq!(
            Value::Object(s),
            json!({"retry": {"enabled": true, "provider": {"maxRetryDelayMs": 5000}}, "steeringMode": "all", "transport": "websocket"})
        );
        let mut keep = obj(
            json!({"queueMode": "all", "steeringMode": "one-at-a-time", "retry": {"maxDelayMs": 1, "provider": {"maxRetryDelayMs": 2}}}),
        );
        migrate_settings(&mut keep);
        assert_eq!(keep["steeringMode"], "one-at-a-time");
        assert_eq!(keep["queueMode"], "all");
        assert_eq!(keep["retry"], json!({"provider": {"maxRetryDelayMs": 2}}));
    }

    #[test]
    fn writes_only_modified_keys_and_preserves_the_rest() {
        let agent = temp_dir("persist");
        let cwd = agent.join("proj");
        fs::create_dir_all(cwd.join(".pi")).unwrap();
        let path = agent.join("settings.json");
        fs::write(
            &path,
            r#"{"theme":"dark","compaction":{"reserveTokens":1000},"steeringMode":"all"}"#,
        )
        .unwrap();
        fs::write(
            cwd.join(".pi/settings.json"),
            r#"{"steeringMode":"one-at-a-time"}"#,
        )
        .unwrap();
        let (mut s, errors) = Settings::load(&agent, Some(&cwd));
        assert!(errors.is_empty());
        assert_eq!(s.get_str("steeringMode"), Some("one-at-a-time"));
        // Another process edits the file after we loaded it.
        fs::write(&path, r#"{"theme":"light","compaction":{"reserveTokens":2000,"keepRecentTokens":5},"steeringMode":"all"}"#).unwrap();
        s.set_nested("compaction", "enabled", json!(false));
        s.set_top("defaultProvider", json!("openai"));
        settled();
        let written = fs::read_to_string(&path).unwrap();
        assert_eq!(
            written,
            "{\n  \"theme\": \"light\",\n  \"compaction\": {\n    \"reserveTokens\": 2000,\n    \"keepRecentTokens\": 5,\n    \"enabled\": false\n  },\n  \"steeringMode\": \"all\",\n  \"defaultProvider\": \"openai\"\n}"
        );
        // The project file still wins for reads.
        s.set_top("steeringMode", json!("all"));
        assert_eq!(s.get_str("steeringMode"), Some("one-at-a-time"));
        settled();
        // No temp file or lock left behind.
        let leftovers: Vec<_> = fs::read_dir(&agent)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 2, "{leftovers:?}");
        let _ = fs::remove_dir_all(&agent);
    }

    #[test]
    fn a_reload_keeps_a_broken_file_s_settings_and_a_fresh_read_empties_them() {
        let agent = temp_dir("reload");
        let cwd = agent.join("proj");
        fs::create_dir_all(cwd.join(".pi")).unwrap();
        let path = agent.join("settings.json");
        fs::write(&path, r#"{"steeringMode":"all"}"#).unwrap();
        fs::write(cwd.join(".pi/settings.json"), r#"{"followUpMode":"all"}"#).unwrap();
        let (mut s, _) = Settings::load(&agent, Some(&cwd));
        fs::write(&path, r#"{"steeringMode":"one-at-a-time","theme":"x"}"#).unwrap();
        assert!(s.reload(Some(&cwd), true).is_empty());
        assert_eq!(s.get_str("theme"), Some("x"));
        assert_eq!(s.get_str("followUpMode"), Some("all"));
        fs::write(&path, "{ broken").unwrap();
        let errors = s.reload(Some(&cwd), true);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(s.get_str("theme"), Some("x"));
        // Not written to while it does not parse.
        s.set_top("defaultModel", json!("m"));
        settled();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{ broken");
        assert_eq!(s.reload(Some(&cwd), false).len(), 1);
        assert_eq!(s.get_str("theme"), None);
        // Without the project (not trusted), its file is not read.
        s.reload(None, false);
        assert_eq!(s.get_str("followUpMode"), None);
        let _ = fs::remove_dir_all(&agent);
    }

    #[test]
    fn never_writes_a_file_that_does_not_parse() {
        let agent = temp_dir("broken");
        let path = agent.join("settings.json");
        fs::write(&path, "{ broken").unwrap();
        let (mut s, errors) = Settings::load(&agent, Some(&agent));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "global");
        s.set_top("defaultModel", json!("x"));
        settled();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{ broken");
        assert_eq!(s.get_str("defaultModel"), Some("x"));

        // Broken only at write time: reported, file untouched.
        fs::write(&path, "{}").unwrap();
        let (mut s, _) = Settings::load(&agent, Some(&agent));
        fs::write(&path, "nope").unwrap();
        // The write fails on the disk-sync thread (reported there); the file stays untouched.
        s.set_top("defaultModel", json!("y"));
        settled();
        assert_eq!(fs::read_to_string(&path).unwrap(), "nope");
        assert_eq!(s.modified.len(), 1, "kept for the next save");
        let _ = fs::remove_dir_all(&agent);
    }

    #[test]
    fn creates_missing_global_file_and_dir() {
        let agent = temp_dir("create").join("nested");
        let (mut s, errors) = Settings::load(&agent, Some(&agent));
        assert!(errors.is_empty());
        s.set_nested("retry", "enabled", json!(false));
        settled();
        assert_eq!(
            fs::read_to_string(agent.join("settings.json")).unwrap(),
            "{\n  \"retry\": {\n    \"enabled\": false\n  }\n}"
        );
        assert_eq!(s.get_bool("retry.enabled"), Some(false));
        let _ = fs::remove_dir_all(agent.parent().unwrap());
    }
}
