//! The approval gate (pure): whether a tool call may run, must be asked about, or is refused,
//! from the settings `approvals` object. It is pi-rs's own addition (pi has no such gate), so a
//! settings file without `approvals` allows everything and nothing changes for pi's clients.
//!
//! Order of evaluation for one call (first that applies decides):
//! 1. `rules` that match the tool and every argument pattern they name — the strictest matching
//!    action wins (deny > ask > allow);
//! 2. for `write` / `edit`: a `path` outside the working directory → `outsideCwd` (default ask);
//! 3. the tool's default: `tools.<name>`, else `tools.extension` for extension tools, else
//!    `default` (default allow).
//!
//! An `ask` already granted "for this session" (its grant key is in `SessionGrants`) allows.
//!
//! Patterns are wildcards (`*` any run of characters, `?` one character), matched against the
//! whole argument text. A `command` is also split into its normalized simple commands
//! (`shell_split`: wrappers, assignments, groups and `if` bodies unwrapped): a `deny` / `ask` rule
//! matches when the whole text or any one simple command does; an `allow` rule only when every
//! simple command does and the splitter saw through the whole line. When a tool has any `deny` or
//! `ask` rule on `command`, a line the splitter could not see through is asked about, never
//! allowed silently. This is a convenience, not a sandbox: the sandbox is the boundary.
//!
//! Input: tool name, raw arguments, cwd, grants. Output: `Decision`. No IO besides reading the
//! cwd's canonical form.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::shell_split::{self, ShellLine};
use crate::glob::wildcard_match;
use crate::rpc::events::Event;

/// The three answers of an approval dialog, in the order shown.
pub const ASK_OPTIONS: [&str; 3] = ["Allow once", "Allow for this session", "Deny"];
/// How long an approval dialog waits before denying, unless `timeoutSeconds` says otherwise.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest call an approval dialog shows whole; longer ones are denied.
const MAX_SHOWN_CHARS: usize = 20_000;
/// Tools whose `path` argument is a file they change.
const FILE_TOOLS: [&str; 2] = ["write", "edit"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RuleAction {
    Allow,
    Ask,
    Deny,
}

impl RuleAction {
    fn parse(text: &str) -> Option<RuleAction> {
        match text {
            "allow" => Some(RuleAction::Allow),
            "ask" => Some(RuleAction::Ask),
            "deny" => Some(RuleAction::Deny),
            _ => None,
        }
    }
}

/// The gate's verdict for one tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Allow,
    /// Ask the user; on "Allow for this session" add `grant_key` to the session's grants.
    Ask {
        title: String,
        message: String,
        grant_key: String,
    },
    /// Refuse; `reason` becomes the tool result text (`isError: true`).
    Deny {
        reason: String,
    },
}

/// "Allow for this session" answers given so far (lives as long as the agent's session).
#[derive(Clone, Debug, Default)]
pub struct SessionGrants(HashSet<String>);

impl SessionGrants {
    pub fn grant(&mut self, key: &str) {
        self.0.insert(key.to_string());
    }
    pub fn contains(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

/// The user's answer to an approval dialog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalAnswer {
    AllowOnce,
    AllowForSession,
    /// Chose Deny, cancelled, or did not answer in time (`timed_out`).
    Deny {
        timed_out: bool,
    },
}

impl ApprovalAnswer {
    /// Reads a `select` answer; anything but the two allow options denies.
    pub fn from_selection(
        value: Option<&Value>,
        cancelled: bool,
        timed_out: bool,
    ) -> ApprovalAnswer {
        match value.and_then(Value::as_str) {
            Some(choice) if !cancelled && !timed_out && choice == ASK_OPTIONS[0] => {
                ApprovalAnswer::AllowOnce
            }
            Some(choice) if !cancelled && !timed_out && choice == ASK_OPTIONS[1] => {
                ApprovalAnswer::AllowForSession
            }
            _ => ApprovalAnswer::Deny { timed_out },
        }
    }

    /// The tool result text when denied.
    pub fn denial_reason(self, tool: &str) -> Option<String> {
        match self {
            ApprovalAnswer::Deny { timed_out: true } => Some(format!(
                "The user did not approve {tool} in time; the call was denied"
            )),
            ApprovalAnswer::Deny { timed_out: false } => {
                Some(format!("The user denied running {tool}"))
            }
            ApprovalAnswer::AllowOnce | ApprovalAnswer::AllowForSession => None,
        }
    }
}

/// The `extension_ui_request` select dialog for an `Ask` decision.
pub fn ask_request(ui_id: &str, title: &str, message: &str, timeout: Duration) -> Event {
    let mut fields = serde_json::Map::new();
    fields.insert("title".into(), json!(format!("{title}\n{message}")));
    fields.insert("options".into(), json!(ASK_OPTIONS));
    fields.insert("timeout".into(), json!(timeout.as_millis() as u64));
    Event::ExtensionUiRequest {
        id: ui_id.to_string(),
        method: "select".into(),
        fields,
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    tool: String,
    /// (argument name, wildcard pattern)
    patterns: Vec<(String, String)>,
    action: RuleAction,
    reason: Option<String>,
}

/// The parsed `approvals` settings.
#[derive(Clone, Debug, Default)]
pub struct ApprovalPolicy {
    enabled: bool,
    rules: Vec<Rule>,
    tool_defaults: HashMap<String, RuleAction>,
    default: Option<RuleAction>,
    outside_cwd: Option<RuleAction>,
    timeout: Option<Duration>,
    extension_tools: HashSet<String>,
}

impl ApprovalPolicy {
    /// Reads settings `approvals` (None or null: the gate is off). Also accepts a bare array as
    /// the `rules` list. Invalid parts are skipped and described in the returned warnings.
    pub fn from_settings(value: Option<&Value>) -> (ApprovalPolicy, Vec<String>) {
        let mut warnings = Vec::new();
        let mut policy = ApprovalPolicy::default();
        let object = match value {
            None | Some(Value::Null) => return (policy, warnings),
            Some(Value::Array(rules)) => {
                let mut object = Map::new();
                object.insert("rules".into(), Value::Array(rules.clone()));
                object
            }
            Some(Value::Object(object)) => object.clone(),
            Some(_) => {
                warnings.push("approvals must be an object; the approval gate is off".into());
                return (policy, warnings);
            }
        };
        policy.enabled = true;
        let action_of = |value: &Value, what: &str, warnings: &mut Vec<String>| {
            let action = value.as_str().and_then(RuleAction::parse);
            if action.is_none() {
                warnings.push(format!(
                    "approvals: {what} must be \"allow\", \"ask\" or \"deny\""
                ));
            }
            action
        };
        if let Some(value) = object.get("default") {
            policy.default = action_of(value, "default", &mut warnings);
        }
        if let Some(value) = object.get("outsideCwd") {
            policy.outside_cwd = action_of(value, "outsideCwd", &mut warnings);
        }
        match object.get("timeoutSeconds") {
            None => {}
            Some(value) => match value.as_f64().filter(|s| *s > 0.0 && s.is_finite()) {
                // A repository's settings must never crash pi-rs: beyond a day is a day (a
                // deadline that far out overflows the clock arithmetic).
                Some(seconds) if seconds > crate::deadline::MAX_WAIT.as_secs_f64() => {
                    warnings.push(format!(
                        "approvals: timeoutSeconds {seconds} is too large; using {}",
                        crate::deadline::MAX_WAIT.as_secs()
                    ));
                    policy.timeout = Some(crate::deadline::MAX_WAIT);
                }
                Some(seconds) => policy.timeout = Some(Duration::from_secs_f64(seconds)),
                None => warnings.push("approvals: timeoutSeconds must be a positive number".into()),
            },
        }
        if let Some(tools) = object.get("tools") {
            match tools.as_object() {
                Some(tools) => {
                    for (name, value) in tools {
                        if let Some(action) =
                            action_of(value, &format!("tools.{name}"), &mut warnings)
                        {
                            policy.tool_defaults.insert(name.clone(), action);
                        }
                    }
                }
                None => warnings.push("approvals: tools must be an object".into()),
            }
        }
        let rules = match object.get("rules") {
            None => &Vec::new(),
            Some(Value::Array(rules)) => rules,
            Some(_) => {
                warnings.push("approvals: rules must be an array".into());
                &Vec::new()
            }
        };
        for (index, rule) in rules.iter().enumerate() {
            match parse_rule(rule) {
                Ok(rule) => policy.rules.push(rule),
                Err(e) => warnings.push(format!("approvals: rules[{index}] skipped: {e}")),
            }
        }
        (policy, warnings)
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Tools owned by extensions (they get the `tools.extension` default).
    pub fn set_extension_tools(&mut self, names: impl IntoIterator<Item = String>) {
        self.extension_tools = names.into_iter().collect();
    }

    /// How long an approval dialog waits before it denies.
    pub fn ask_timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_ASK_TIMEOUT)
    }

    pub fn decide(&self, tool: &str, args: &Value, cwd: &Path, grants: &SessionGrants) -> Decision {
        if !self.enabled {
            return Decision::Allow;
        }
        let verdict = self.verdict(tool, args, cwd);
        match verdict.action {
            RuleAction::Allow => Decision::Allow,
            RuleAction::Deny => Decision::Deny {
                reason: verdict.reason.unwrap_or_else(|| {
                    format!(
                        "Blocked by the approval rules: {tool} is denied{}",
                        verdict.why
                    )
                }),
            },
            RuleAction::Ask if grants.contains(&verdict.grant_key) => Decision::Allow,
            RuleAction::Ask => {
                let shown = describe_call(tool, args);
                // Nobody reviews what they cannot see: too long to show is denied, not asked.
                if shown.chars().count() > MAX_SHOWN_CHARS {
                    return Decision::Deny {
                        reason: format!(
                            "The {tool} call is too long to show in an approval dialog \
                             ({} characters); it was denied",
                            shown.chars().count()
                        ),
                    };
                }
                Decision::Ask {
                    title: format!("Allow {tool}?"),
                    message: format!("{shown}{}", verdict.why),
                    grant_key: verdict.grant_key,
                }
            }
        }
    }

    fn verdict(&self, tool: &str, args: &Value, cwd: &Path) -> Verdict {
        let shell = args
            .get("command")
            .and_then(Value::as_str)
            .map(|text| (text, shell_split::split(text)));
        let verdict = self.rule_verdict(tool, args, cwd, shell.as_ref().map(|(_, s)| s));
        // A line the splitter could not see through is never allowed past deny/ask rules.
        if let Some((text, line)) = &shell
            && line.opaque
            && verdict.action == RuleAction::Allow
            && self.rules.iter().any(|r| {
                r.action != RuleAction::Allow
                    && wildcard_match(&r.tool, tool, true)
                    && r.patterns.iter().any(|(name, _)| name == "command")
            })
        {
            return Verdict {
                action: RuleAction::Ask,
                grant_key: format!("opaque:{tool}:{text}"),
                reason: None,
                why: " (the command cannot be fully checked against the approval rules)".into(),
            };
        }
        verdict
    }

    fn rule_verdict(
        &self,
        tool: &str,
        args: &Value,
        cwd: &Path,
        shell: Option<&ShellLine>,
    ) -> Verdict {
        let mut best: Option<(usize, &Rule)> = None;
        for (index, rule) in self.rules.iter().enumerate() {
            if rule.matches(tool, args, cwd, shell)
                && best.is_none_or(|(_, b)| rule.action > b.action)
            {
                best = Some((index, rule));
            }
        }
        if let Some((index, rule)) = best {
            let shown: Vec<String> = rule
                .patterns
                .iter()
                .map(|(name, pattern)| format!("{name} \"{pattern}\""))
                .collect();
            let why = if shown.is_empty() {
                String::new()
            } else {
                format!(" (rule: {})", shown.join(", "))
            };
            return Verdict {
                action: rule.action,
                grant_key: format!("rule:{index}"),
                reason: rule.reason.clone(),
                why,
            };
        }
        if FILE_TOOLS.contains(&tool)
            && let Some(path) = args.get("path").and_then(Value::as_str)
            && !is_inside(&resolve(path, cwd), cwd)
        {
            return Verdict {
                action: self.outside_cwd.unwrap_or(RuleAction::Ask),
                grant_key: format!("outside-cwd:{tool}"),
                reason: None,
                why: " (outside the working directory)".into(),
            };
        }
        let action = self
            .tool_defaults
            .get(tool)
            .or_else(|| {
                self.extension_tools
                    .contains(tool)
                    .then(|| self.tool_defaults.get("extension"))
                    .flatten()
            })
            .copied()
            .or(self.default)
            .unwrap_or(RuleAction::Allow);
        Verdict {
            action,
            grant_key: format!("tool:{tool}"),
            reason: None,
            why: String::new(),
        }
    }
}

struct Verdict {
    action: RuleAction,
    grant_key: String,
    /// A rule's own deny reason.
    reason: Option<String>,
    /// Why the verdict applies, appended to messages (" (rule: …)").
    why: String,
}

impl Rule {
    /// `shell` is the split `command` argument, when there is one.
    fn matches(&self, tool: &str, args: &Value, cwd: &Path, shell: Option<&ShellLine>) -> bool {
        if !wildcard_match(&self.tool, tool, true) {
            return false;
        }
        self.patterns.iter().all(|(name, pattern)| {
            let text = match args.get(name) {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => return false,
            };
            if name == "path" && FILE_TOOLS.contains(&tool) {
                // What the call will really touch: `/tmp/../x` is not under `/tmp/*`.
                let real = resolve(&text, cwd).to_string_lossy().into_owned();
                return if self.action == RuleAction::Allow {
                    wildcard_match(pattern, &real, true)
                } else {
                    wildcard_match(pattern, &text, true) || wildcard_match(pattern, &real, true)
                };
            }
            match (name.as_str(), shell) {
                ("command", Some(line)) if self.action == RuleAction::Allow => {
                    // Every simple command must be allowed, and all of the line seen.
                    !line.opaque
                        && !line.commands.is_empty()
                        && line
                            .commands
                            .iter()
                            .all(|c| wildcard_match(pattern, c, true))
                }
                ("command", Some(line)) => {
                    wildcard_match(pattern, &text, true)
                        || line
                            .commands
                            .iter()
                            .any(|c| wildcard_match(pattern, c, true))
                }
                _ => wildcard_match(pattern, &text, true),
            }
        })
    }
}

fn parse_rule(value: &Value) -> Result<Rule, String> {
    let object = value.as_object().ok_or("a rule must be an object")?;
    let tool = object
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("tool must be a string")?;
    let action = object
        .get("action")
        .and_then(Value::as_str)
        .and_then(RuleAction::parse)
        .ok_or("action must be \"allow\", \"ask\" or \"deny\"")?;
    let mut patterns = Vec::new();
    for (key, value) in object {
        if matches!(key.as_str(), "tool" | "action" | "reason") {
            continue;
        }
        let pattern = value
            .as_str()
            .ok_or_else(|| format!("pattern {key} must be a string"))?;
        patterns.push((key.clone(), pattern.to_string()));
    }
    Ok(Rule {
        tool: tool.to_string(),
        patterns,
        action,
        reason: object
            .get("reason")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

/// A path argument exactly as the file tools will resolve it (`@`, `~`, Unicode spaces, `..`),
/// then with symlinks of its existing part followed: what the call will really touch.
fn resolve(path: &str, cwd: &Path) -> PathBuf {
    crate::tools::path_guard::real_path(&crate::paths::resolve_to_cwd(path, cwd))
}

/// Whether the real `path` lies in the real cwd.
fn is_inside(path: &Path, cwd: &Path) -> bool {
    path.starts_with(crate::tools::path_guard::real_path(cwd))
}

/// The call as the dialog shows it: the whole command (or path, or arguments) with whitespace
/// that could hide a tail made visible. The user must see everything they approve.
fn describe_call(tool: &str, args: &Value) -> String {
    let shown = match (args.get("command"), args.get("path")) {
        (Some(Value::String(command)), _) if tool == "bash" => command.clone(),
        (_, Some(Value::String(path))) => path.clone(),
        _ => args.to_string(),
    };
    visible_whitespace(&shown)
}

/// Runs of 3+ spaces become `⟨N spaces⟩`; tabs, carriage returns and other invisible characters
/// become `⟨tab⟩`, `⟨CR⟩`, `⟨U+XXXX⟩`. Newlines stay (a dialog shows lines).
fn visible_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {
                let mut run = 1;
                while chars.peek() == Some(&' ') {
                    chars.next();
                    run += 1;
                }
                if run >= 3 {
                    out.push_str(&format!("⟨{run} spaces⟩"));
                } else {
                    out.extend(std::iter::repeat_n(' ', run));
                }
            }
            '\t' => out.push_str("⟨tab⟩"),
            '\r' => out.push_str("⟨CR⟩"),
            '\n' => out.push('\n'),
            c if c.is_control()
                || c.is_whitespace()
                || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}') =>
            {
                out.push_str(&format!("⟨U+{:04X}⟩", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(settings: Value) -> ApprovalPolicy {
        let (policy, warnings) = ApprovalPolicy::from_settings(Some(&settings));
        assert!(warnings.is_empty(), "{warnings:?}");
        policy
    }

    fn cwd() -> PathBuf {
        PathBuf::from("/work/project")
    }

    #[test]
    fn no_settings_allows_everything() {
        let (policy, warnings) = ApprovalPolicy::from_settings(None);
        assert!(warnings.is_empty());
        assert!(!policy.is_enabled());
        let decision = policy.decide(
            "bash",
            &json!({"command":"rm -rf /"}),
            &cwd(),
            &SessionGrants::default(),
        );
        assert_eq!(decision, Decision::Allow);
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("rm *", "rm -rf build", true));
        assert!(wildcard_match("*", "", true));
        assert!(wildcard_match("git push*", "git push", true));
        assert!(wildcard_match("a?c", "abc", true));
        assert!(!wildcard_match("a?c", "ac", true));
        assert!(!wildcard_match("rm *", "echo rm -rf", true));
        assert!(wildcard_match("*.lock", "/x/Cargo.lock", true));
        assert!(wildcard_match("*a*b*", "xxaxxbxx", true));
        assert!(!wildcard_match("*a*b", "xxbxxa", true));
        // A `*` in the text is text: the pattern's `*` still spans it.
        assert!(wildcard_match("ls *", "ls *b", true));
    }

    #[test]
    fn bash_rules_match_any_simple_command() {
        let policy = policy(json!({"rules":[{"tool":"bash","command":"rm *","action":"ask"}]}));
        let grants = SessionGrants::default();
        for command in ["rm -rf build", "cd x && rm -rf y", "ls; rm a", "ls\nrm b"] {
            let decision = policy.decide("bash", &json!({"command": command}), &cwd(), &grants);
            assert!(
                matches!(decision, Decision::Ask { .. }),
                "{command}: {decision:?}"
            );
        }
        let decision = policy.decide("bash", &json!({"command":"ls -la"}), &cwd(), &grants);
        assert_eq!(decision, Decision::Allow);
    }

    #[test]
    fn strictest_matching_rule_wins_and_deny_has_a_reason() {
        let policy = policy(json!({"rules":[
            {"tool":"bash","command":"git *","action":"allow"},
            {"tool":"bash","command":"git push*","action":"deny","reason":"no pushing"},
            {"tool":"*","action":"allow"}
        ]}));
        let grants = SessionGrants::default();
        assert_eq!(
            policy.decide(
                "bash",
                &json!({"command":"git push origin"}),
                &cwd(),
                &grants
            ),
            Decision::Deny {
                reason: "no pushing".into()
            }
        );
        assert_eq!(
            policy.decide("bash", &json!({"command":"git status"}), &cwd(), &grants),
            Decision::Allow
        );
        let policy = self::policy(json!({"tools":{"bash":"deny"}}));
        let Decision::Deny { reason } =
            policy.decide("bash", &json!({"command":"ls"}), &cwd(), &grants)
        else {
            panic!()
        };
        assert!(reason.contains("bash is denied"), "{reason}");
    }

    #[test]
    fn writes_outside_the_cwd_ask_unless_a_rule_says_otherwise() {
        let policy = policy(json!({"rules":[{"tool":"write","path":"/tmp/*","action":"allow"}]}));
        let grants = SessionGrants::default();
        let inside = policy.decide("write", &json!({"path":"src/a.rs"}), &cwd(), &grants);
        assert_eq!(inside, Decision::Allow);
        let escaping = policy.decide("edit", &json!({"path":"../other/a.rs"}), &cwd(), &grants);
        let Decision::Ask {
            message, grant_key, ..
        } = escaping
        else {
            panic!("{escaping:?}")
        };
        assert!(
            message.contains("outside the working directory"),
            "{message}"
        );
        assert_eq!(grant_key, "outside-cwd:edit");
        let absolute = policy.decide("write", &json!({"path":"/etc/passwd"}), &cwd(), &grants);
        assert!(matches!(absolute, Decision::Ask { .. }));
        let tmp = policy.decide("write", &json!({"path":"/tmp/x"}), &cwd(), &grants);
        assert_eq!(tmp, Decision::Allow);
        let denied = self::policy(json!({"outsideCwd":"deny"}));
        assert!(matches!(
            denied.decide("write", &json!({"path":"/etc/x"}), &cwd(), &grants),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn session_grants_turn_ask_into_allow() {
        let policy = policy(json!({"tools":{"bash":"ask"}}));
        let mut grants = SessionGrants::default();
        let Decision::Ask {
            grant_key, title, ..
        } = policy.decide("bash", &json!({"command":"make"}), &cwd(), &grants)
        else {
            panic!()
        };
        assert_eq!(title, "Allow bash?");
        grants.grant(&grant_key);
        assert_eq!(
            policy.decide("bash", &json!({"command":"make test"}), &cwd(), &grants),
            Decision::Allow
        );
    }

    #[test]
    fn extension_tools_get_their_own_default() {
        let mut policy = policy(json!({"default":"allow","tools":{"extension":"ask"}}));
        policy.set_extension_tools(["word_count".to_string()]);
        let grants = SessionGrants::default();
        assert!(matches!(
            policy.decide("word_count", &json!({"text":"a b"}), &cwd(), &grants),
            Decision::Ask { .. }
        ));
        assert_eq!(
            policy.decide("read", &json!({"path":"a"}), &cwd(), &grants),
            Decision::Allow
        );
    }

    #[test]
    fn bad_settings_become_warnings() {
        let (policy, warnings) = ApprovalPolicy::from_settings(Some(&json!({
            "default": "maybe",
            "rules": [{"tool":"bash"}, {"tool":"bash","command":3,"action":"ask"}, "x"],
            "timeoutSeconds": -1
        })));
        assert_eq!(warnings.len(), 5, "{warnings:?}");
        assert!(policy.is_enabled());
        assert_eq!(policy.ask_timeout(), DEFAULT_ASK_TIMEOUT);
        let (_, warnings) = ApprovalPolicy::from_settings(Some(&json!(true)));
        assert_eq!(warnings.len(), 1);
        let (policy, warnings) =
            ApprovalPolicy::from_settings(Some(&json!([{"tool":"bash","action":"deny"}])));
        assert!(warnings.is_empty());
        assert!(matches!(
            policy.decide("bash", &json!({}), &cwd(), &SessionGrants::default()),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn answers_and_the_dialog_record() {
        assert_eq!(
            ApprovalAnswer::from_selection(Some(&json!("Allow once")), false, false),
            ApprovalAnswer::AllowOnce
        );
        assert_eq!(
            ApprovalAnswer::from_selection(Some(&json!("Allow for this session")), false, false),
            ApprovalAnswer::AllowForSession
        );
        assert_eq!(
            ApprovalAnswer::from_selection(Some(&json!("Allow once")), true, false),
            ApprovalAnswer::Deny { timed_out: false }
        );
        assert_eq!(
            ApprovalAnswer::from_selection(None, false, true),
            ApprovalAnswer::Deny { timed_out: true }
        );
        let request = ask_request("u1", "Allow bash?", "rm -rf x", Duration::from_secs(30));
        assert_eq!(
            request.to_extension_value().unwrap().to_string(),
            r#"{"type":"extension_ui_request","id":"u1","method":"select","title":"Allow bash?\nrm -rf x","options":["Allow once","Allow for this session","Deny"],"timeout":30000}"#
        );
    }
}
