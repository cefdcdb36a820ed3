//! Which tools a run offers, chosen as pi 1.6.0 chooses them from `--tools`, `--exclude-tools`,
//! `--no-tools` / `--no-builtin-tools` and settings `defaultTools`:
//!
//! - A `--tools` list is either plain names and `*` patterns (they replace the set: only what they
//!   match is offered, extension and MCP tools included) or only `+name` / `-name` entries (they
//!   adjust the default set, which `defaultTools` may have changed). A mix is an error.
//! - `defaultTools` (user settings, then the project's): plain names replace the default four
//!   built-ins, modifiers adjust them; a project list of only modifiers adjusts the user's list,
//!   any other replaces it.
//! - `--no-tools` starts from nothing and offers only what `--tools` names; `--no-builtin-tools`
//!   starts the built-ins from nothing and leaves extension and MCP tools alone.
//! - `--exclude-tools` (names or patterns) applies last, to every tool.
//!
//! A name that matches no tool is ignored, as in pi; [`Selection::unknown`] lists them so the
//! caller can say so once.

use serde_json::Value;

use super::{ALL_TOOLS, DEFAULT_TOOLS};
use crate::glob::wildcard_match;

/// A tool pi-rs itself provides: the seven file and shell tools, `codemode` and `tool_search`
/// (offered only when named: `--tools`, `defaultTools`, `+codemode`, or turned on for MCP
/// servers whose tools they reach; patterns do not match them).
pub fn is_builtin(name: &str) -> bool {
    ALL_TOOLS.contains(&name)
        || name == super::codemode::TOOL_NAME
        || name == super::tool_search::TOOL_NAME
}

/// `--no-tools` / `--no-builtin-tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTools {
    Keep,
    Builtin,
    All,
}

/// What a tool name must pass to be offered (extension and MCP tools; the built-ins are settled
/// at start in [`Selection::builtins`]).
#[derive(Clone, Debug, Default)]
pub struct ToolFilter {
    /// The allowlist: `--tools` plain names and patterns (`Some([])` with `--no-tools`).
    allowed: Option<Vec<String>>,
    excluded: Vec<String>,
}

impl ToolFilter {
    pub fn allows(&self, name: &str) -> bool {
        !matches_any(&self.excluded, name)
            && self
                .allowed
                .as_ref()
                .is_none_or(|allowed| matches_any(allowed, name))
    }
}

#[derive(Clone, Debug)]
pub struct Selection {
    /// The built-in tools offered, in selection order.
    pub builtins: Vec<String>,
    pub filter: ToolFilter,
    /// The tools follow the defaults (no `--tools` list, or only `+name` / `-name` entries, and
    /// no `--no-tools`): a resumed transcript's tools then replace them, with these modifiers
    /// applied (pi 1.6.0). `None`: the command line chose the tools.
    pub restore_with: Option<Vec<String>>,
}

fn matches_any(entries: &[String], name: &str) -> bool {
    entries.iter().any(|entry| {
        if entry.contains('*') {
            wildcard_match(entry, name, false)
        } else {
            entry == name
        }
    })
}

fn is_modifier(entry: &str) -> bool {
    entry.starts_with('+') || entry.starts_with('-')
}

/// Why a `--tools` list is refused, in pi's words: names mixed with modifiers, or a modifier
/// with a pattern.
pub fn tool_list_error(entries: &[String]) -> Option<String> {
    let modifiers: Vec<&String> = entries.iter().filter(|e| is_modifier(e)).collect();
    if modifiers.is_empty() {
        return None;
    }
    if modifiers.len() < entries.len() {
        return Some("tool names cannot be mixed with +name or -name entries".into());
    }
    modifiers
        .iter()
        .find(|e| e.contains('*'))
        .map(|e| format!("+name and -name entries take exact tool names, not patterns: {e}"))
}

/// `+name` adds a tool, `-name` removes one, in order; other entries are skipped.
pub fn apply_modifiers(base: &[String], entries: &[String]) -> Vec<String> {
    let mut tools = base.to_vec();
    for entry in entries.iter().filter(|e| is_modifier(e)) {
        let name = &entry[1..];
        let position = tools.iter().position(|t| t == name);
        match (entry.starts_with('+'), position) {
            (true, None) if !name.is_empty() => tools.push(name.to_string()),
            (false, Some(index)) => {
                tools.remove(index);
            }
            _ => {}
        }
    }
    tools
}

/// The merged `defaultTools` of the user (`user`) and project (`project`) settings, resolved to
/// names; `None` when neither sets it.
pub fn default_tools(user: Option<&Value>, project: Option<&Value>) -> Option<Vec<String>> {
    let list = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let merged = match (user, project) {
        (None, None) => return None,
        (Some(user), None) => list(user),
        (None, Some(project)) => list(project),
        (Some(user), Some(project)) => {
            let overrides = list(project);
            let adjusts = user.is_array()
                && project
                    .as_array()
                    .is_some_and(|items| items.iter().all(|i| i.as_str().is_some_and(is_modifier)));
            if adjusts {
                list(user).into_iter().chain(overrides).collect()
            } else {
                overrides
            }
        }
    };
    let plain: Vec<String> = merged.iter().filter(|e| !is_modifier(e)).cloned().collect();
    let base = if plain.is_empty() && !merged.is_empty() {
        DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect()
    } else {
        plain
    };
    Some(apply_modifiers(&base, &merged))
}

/// Resolves the selection. `tools` must have passed [`tool_list_error`].
pub fn resolve(
    tools: Option<&[String]>,
    exclude: Option<&[String]>,
    no_tools: NoTools,
    default_tools: Option<Vec<String>>,
) -> Selection {
    let defaults: Vec<String> = match no_tools {
        NoTools::Keep => {
            default_tools.unwrap_or_else(|| DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect())
        }
        NoTools::Builtin | NoTools::All => Vec::new(),
    };
    let modifiers = tools.filter(|list| list.iter().any(|e| is_modifier(e)));
    let selected: Option<Vec<String>> = match modifiers {
        Some(modifiers) => Some(apply_modifiers(&defaults, modifiers)),
        None => tools.map(<[String]>::to_vec),
    };
    let allowed = match (modifiers, no_tools) {
        (Some(_), NoTools::All) => selected.clone(),
        (Some(_), _) => None,
        (None, NoTools::All) => Some(tools.map(<[String]>::to_vec).unwrap_or_default()),
        (None, _) => tools.map(<[String]>::to_vec),
    };
    let filter = ToolFilter {
        allowed,
        excluded: exclude.map(<[String]>::to_vec).unwrap_or_default(),
    };
    let mut builtins: Vec<String> = Vec::new();
    let initial = selected.unwrap_or(defaults);
    let named = initial.iter().filter(|n| is_builtin(n));
    // Naming or matching a tool in the allowlist offers it too (`*` patterns).
    let matched = ALL_TOOLS
        .iter()
        .map(|n| n.to_string())
        .filter(|n| filter.allowed.as_ref().is_some_and(|a| matches_any(a, n)));
    for name in named.cloned().chain(matched) {
        if filter.allows(&name) && !builtins.contains(&name) {
            builtins.push(name);
        }
    }
    let follows_defaults = no_tools == NoTools::Keep && (tools.is_none() || modifiers.is_some());
    let restore_with =
        follows_defaults.then(|| modifiers.map(<[String]>::to_vec).unwrap_or_default());
    Selection {
        builtins,
        filter,
        restore_with,
    }
}

/// The plain names in `lists` (modifiers' names included, patterns skipped) that name no
/// built-in tool, none of `known`, and none `connects_later` accepts (MCP tools), without repeats.
pub fn unknown_names<'a>(
    lists: impl IntoIterator<Item = &'a [String]>,
    known: &[String],
    connects_later: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut unknown: Vec<String> = Vec::new();
    for entry in lists.into_iter().flatten() {
        let name = entry.trim_start_matches(['+', '-']);
        let is_known = name.is_empty()
            || name.contains('*')
            || is_builtin(name)
            || known.iter().any(|k| k == name)
            || connects_later(name);
        if !is_known && !unknown.iter().any(|u| u == name) {
            unknown.push(name.to_string());
        }
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn builtins(tools: Option<&[&str]>, exclude: Option<&[&str]>, no: NoTools) -> Vec<String> {
        let tools = tools.map(strings);
        let exclude = exclude.map(strings);
        resolve(tools.as_deref(), exclude.as_deref(), no, None).builtins
    }

    #[test]
    fn lists_replace_adjust_and_exclude() {
        assert_eq!(builtins(None, None, NoTools::Keep), DEFAULT_TOOLS);
        assert_eq!(
            builtins(Some(&["grep", "read"]), None, NoTools::Keep),
            ["grep", "read"]
        );
        assert_eq!(
            builtins(Some(&["+grep", "-write"]), None, NoTools::Keep),
            ["read", "bash", "edit", "grep"]
        );
        assert_eq!(builtins(Some(&["*"]), None, NoTools::Keep), ALL_TOOLS);
        assert_eq!(
            builtins(None, Some(&["bash", "e*"]), NoTools::Keep),
            ["read", "write"]
        );
        assert_eq!(builtins(None, None, NoTools::All), Vec::<String>::new());
        assert_eq!(builtins(None, None, NoTools::Builtin), Vec::<String>::new());
        assert_eq!(builtins(Some(&["+grep"]), None, NoTools::All), ["grep"]);
    }

    #[test]
    fn the_filter_covers_extension_and_mcp_tools() {
        let list = strings(&["read", "mcp__docs__*"]);
        let only = resolve(Some(&list), None, NoTools::Keep, None).filter;
        assert!(only.allows("mcp__docs__search") && !only.allows("mcp__other__x"));
        assert!(!only.allows("list_mcp_resources") && !only.allows("word_count"));
        let plain = strings(&["read"]);
        let plain = resolve(Some(&plain), None, NoTools::Keep, None).filter;
        assert!(
            !plain.allows("mcp__docs__search"),
            "no mcp__ entry: no MCP tool"
        );
        let modifiers = strings(&["+grep"]);
        let exclude = strings(&["mcp__docs__*"]);
        let adjusted = resolve(Some(&modifiers), Some(&exclude), NoTools::Keep, None).filter;
        assert!(adjusted.allows("word_count") && adjusted.allows("mcp__a__b"));
        assert!(!adjusted.allows("mcp__docs__search"));
        assert!(!resolve(None, None, NoTools::All, None).filter.allows("x"));
        assert!(
            resolve(None, None, NoTools::Builtin, None)
                .filter
                .allows("x")
        );
    }

    #[test]
    fn mixed_lists_are_refused() {
        assert_eq!(tool_list_error(&strings(&["read", "grep*"])), None);
        assert_eq!(tool_list_error(&strings(&["+read", "-bash"])), None);
        assert!(tool_list_error(&strings(&["read", "+grep"])).is_some());
        assert!(
            tool_list_error(&strings(&["+gr*"]))
                .unwrap()
                .ends_with("not patterns: +gr*")
        );
    }

    #[test]
    fn default_tools_merge_user_then_project() {
        let user = json!(["+grep", "-write"]);
        assert_eq!(
            default_tools(Some(&user), None).unwrap(),
            ["read", "bash", "edit", "grep"]
        );
        let project = json!(["-bash"]);
        assert_eq!(
            default_tools(Some(&user), Some(&project)).unwrap(),
            ["read", "edit", "grep"]
        );
        let replacing = json!(["find", "+ls"]);
        assert_eq!(
            default_tools(Some(&user), Some(&replacing)).unwrap(),
            ["find", "ls"]
        );
        assert_eq!(
            default_tools(Some(&json!([])), None).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(default_tools(None, None), None);
    }

    #[test]
    fn unknown_names_skip_patterns_mcp_and_known_tools() {
        let tools = strings(&["read", "nosuch", "+x", "gr*", "mcp__a__b", "word_count"]);
        let exclude = strings(&["ghost", "nosuch"]);
        let known = strings(&["word_count"]);
        assert_eq!(
            unknown_names(
                [tools.as_slice(), exclude.as_slice()],
                &known,
                crate::mcp::is_mcp_tool_name
            ),
            ["nosuch", "x", "ghost"]
        );
    }
}
