//! Prompt templates (FACTS §13.3): `*.md` files whose body is sent in place of a `/name args`
//! message, with the arguments substituted. Owns loading one template file or one directory of
//! them (non-recursive), pi's argument splitting and placeholder substitution, and the expansion
//! of a message text. Discovery order and name collisions live in `discovery.rs`.

use std::path::Path;

use super::files::{SourceInfo, read_dir_sorted};
use super::frontmatter::{YamlValue, parse_frontmatter};

/// One loaded template.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptTemplate {
    /// File name without `.md`; invoked as `/<name>`.
    pub name: String,
    /// Frontmatter `description`, else the first non-empty body line cut to 60 characters.
    pub description: String,
    pub argument_hint: Option<String>,
    /// Body without frontmatter: the text the arguments are substituted into.
    pub content: String,
    pub file_path: String,
    pub source_info: SourceInfo,
}

/// Loads one template file. Unreadable files and frontmatter pi would reject give an error
/// message (pi skips such files silently; the caller only logs it).
pub(crate) fn load_template_from_file(
    path: &Path,
    source_info: SourceInfo,
) -> Result<PromptTemplate, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    let parsed = parse_frontmatter(&text).map_err(|e| e.to_string())?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = file_name
        .strip_suffix(".md")
        .unwrap_or(&file_name)
        .to_string();
    let mut description = match parsed.frontmatter.get("description") {
        Some(YamlValue::String(s)) => s.clone(),
        // pi keeps a non-string value as is; its text is the closest a string can get.
        Some(YamlValue::Number(n)) if n.parse::<f64>().is_ok_and(|v| v != 0.0) => n.clone(),
        Some(YamlValue::Bool(true)) => "true".to_string(),
        _ => String::new(),
    };
    if description.is_empty()
        && let Some(first) = parsed.body.split('\n').find(|l| !l.trim().is_empty())
    {
        description = first.chars().take(60).collect();
        if first.chars().count() > 60 {
            description.push_str("...");
        }
    }
    let argument_hint = parsed
        .frontmatter
        .string("argument-hint")
        .filter(|h| !h.is_empty())
        .map(str::to_string);
    Ok(PromptTemplate {
        name,
        description,
        argument_hint,
        content: parsed.body,
        file_path: path.to_string_lossy().into_owned(),
        source_info,
    })
}

/// Loads the `*.md` files directly inside `dir` (files and symlinks to files, in name order;
/// unlike auto-discovery, dot-files are not skipped here — as in pi).
pub(crate) fn load_templates_from_dir(
    dir: &Path,
    source_info_for: &dyn Fn(&Path) -> SourceInfo,
    warnings: &mut Vec<String>,
) -> Vec<PromptTemplate> {
    let mut templates = Vec::new();
    for (name, path) in read_dir_sorted(dir) {
        if !name.ends_with(".md") || !path.is_file() {
            continue;
        }
        match load_template_from_file(&path, source_info_for(&path)) {
            Ok(t) => templates.push(t),
            Err(e) => warnings.push(format!("{}: {e}", path.display())),
        }
    }
    templates
}

/// Splits template arguments on spaces and tabs; `"…"` and `'…'` group words and lose their
/// quotes. An unclosed quote runs to the end of the text.
pub fn parse_command_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_quote: Option<char> = None;
    for c in text.chars() {
        match in_quote {
            Some(q) if c == q => in_quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => in_quote = Some(c),
            None if c == ' ' || c == '\t' => {
                if !current.is_empty() {
                    args.push(std::mem::take(&mut current));
                }
            }
            None => current.push(c),
        }
    }
    if !current.is_empty() {
        args.push(current);
    }
    args
}

/// Substitutes placeholders in four passes, in pi's order: `$1…$N` (missing → empty), then
/// `${@:N}` / `${@:N:L}` (1-based, 0 counts as 1), then `$ARGUMENTS`, then `$@`. Each pass reads
/// the previous pass's output, exactly like pi's chain of `String.replace` calls — including
/// JavaScript's `$$`, `$&`, `` $` `` and `$'` patterns inside the replacement text of the last two.
pub fn substitute_args(content: &str, args: &[String]) -> String {
    let all_args = args.join(" ");
    let result = replace_positional(content, args);
    let result = replace_slices(&result, args);
    let result = replace_literal_js(&result, "$ARGUMENTS", &all_args);
    replace_literal_js(&result, "$@", &all_args)
}

/// Parses a run of ASCII digits; values too large to index anything become `usize::MAX`.
fn parse_index(digits: &str) -> usize {
    digits.parse::<usize>().unwrap_or(usize::MAX)
}

fn digit_run(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count()
}

fn replace_positional(content: &str, args: &[String]) -> String {
    let bytes = content.as_bytes();
    let mut out = String::with_capacity(content.len());
    let mut last = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let n = digit_run(bytes, i + 1);
            if n > 0 {
                out.push_str(&content[last..i]);
                let number = parse_index(&content[i + 1..i + 1 + n]);
                if let Some(arg) = number.checked_sub(1).and_then(|k| args.get(k)) {
                    out.push_str(arg);
                }
                i += 1 + n;
                last = i;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&content[last..]);
    out
}

fn replace_slices(content: &str, args: &[String]) -> String {
    let bytes = content.as_bytes();
    let mut out = String::with_capacity(content.len());
    let mut last = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some((len, value)) = match_slice(content, i, args) {
            out.push_str(&content[last..i]);
            out.push_str(&value);
            i += len;
            last = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&content[last..]);
    out
}

/// Matches `${@:N}` or `${@:N:L}` at byte `at`: (matched length, replacement).
fn match_slice(content: &str, at: usize, args: &[String]) -> Option<(usize, String)> {
    let bytes = content.as_bytes();
    if !bytes[at..].starts_with(b"${@:") {
        return None;
    }
    let start_digits = at + 4;
    let n = digit_run(bytes, start_digits);
    if n == 0 {
        return None;
    }
    let start = parse_index(&content[start_digits..start_digits + n]).saturating_sub(1);
    let mut pos = start_digits + n;
    let mut length: Option<usize> = None;
    if bytes.get(pos) == Some(&b':') {
        let l = digit_run(bytes, pos + 1);
        if l == 0 {
            return None;
        }
        length = Some(parse_index(&content[pos + 1..pos + 1 + l]));
        pos += 1 + l;
    }
    if bytes.get(pos) != Some(&b'}') {
        return None;
    }
    let from = start.min(args.len());
    let to = match length {
        Some(l) => from.saturating_add(l).min(args.len()),
        None => args.len(),
    };
    Some((pos + 1 - at, args[from..to].join(" ")))
}

/// `text.replace(/needle/g, replacement)` with JavaScript's replacement patterns.
fn replace_literal_js(text: &str, needle: &str, replacement: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (pos, matched) in text.match_indices(needle) {
        out.push_str(&text[last..pos]);
        let after = &text[pos + matched.len()..];
        expand_js_replacement(&mut out, replacement, matched, &text[..pos], after);
        last = pos + matched.len();
    }
    out.push_str(&text[last..]);
    out
}

/// JavaScript's GetSubstitution for a pattern without capture groups.
fn expand_js_replacement(
    out: &mut String,
    replacement: &str,
    matched: &str,
    before: &str,
    after: &str,
) {
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('$') => {
                chars.next();
                out.push('$');
            }
            Some('&') => {
                chars.next();
                out.push_str(matched);
            }
            Some('`') => {
                chars.next();
                out.push_str(before);
            }
            Some('\'') => {
                chars.next();
                out.push_str(after);
            }
            _ => out.push('$'),
        }
    }
}

/// Expands `/name args` when `name` is a template; any other text comes back unchanged.
pub fn expand_template(text: &str, templates: &[PromptTemplate]) -> String {
    let Some(rest) = text.strip_prefix('/') else {
        return text.to_string();
    };
    let (name, args) = match rest.find(' ') {
        Some(space) => (&rest[..space], &rest[space + 1..]),
        None => (rest, ""),
    };
    match templates.iter().find(|t| t.name == name) {
        Some(template) => substitute_args(&template.content, &parse_command_args(args)),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn template(name: &str, content: &str) -> PromptTemplate {
        PromptTemplate {
            name: name.into(),
            description: String::new(),
            argument_hint: None,
            content: content.into(),
            file_path: format!("/p/{name}.md"),
            source_info: SourceInfo::default(),
        }
    }

    #[test]
    fn arguments_split_on_blanks_with_quotes() {
        assert_eq!(
            parse_command_args(r#"a.ts "too slow" now"#),
            args(&["a.ts", "too slow", "now"])
        );
        assert_eq!(
            parse_command_args("  a\t 'b c'd \"\" e"),
            args(&["a", "b cd", "e"])
        );
        assert_eq!(
            parse_command_args("x 'unclosed rest"),
            args(&["x", "unclosed rest"])
        );
        assert_eq!(parse_command_args("it\"'\"s"), args(&["it's"]));
        assert!(parse_command_args("   ").is_empty());
    }

    #[test]
    fn substitution_rules() {
        let a = args(&["a.ts", "too slow", "now"]);
        assert_eq!(substitute_args("$1|${@:2}", &a), "a.ts|too slow now");
        assert_eq!(substitute_args("$3 $4 $0 $10", &a), "now   ");
        assert_eq!(
            substitute_args("${@:1:2}|${@:0}|${@:2:1}|${@:9}", &a),
            "a.ts too slow|a.ts too slow now|too slow|"
        );
        assert_eq!(
            substitute_args("$ARGUMENTS / $@", &a),
            "a.ts too slow now / a.ts too slow now"
        );
        assert_eq!(
            substitute_args("${@:2:}|${@:x}|$x", &a),
            "${@:2:}|${@:x}|$x"
        );
        assert_eq!(substitute_args("$99999999999999999999999", &a), "");
        // A positional value is not re-read by the positional pass itself.
        assert_eq!(substitute_args("$1 $2", &args(&["$2", "b"])), "$2 b");
    }

    #[test]
    fn later_passes_see_earlier_output_like_pi() {
        // Same results as pi's chained String.replace calls.
        assert_eq!(substitute_args("$1", &args(&["$@"])), "$@");
        assert_eq!(
            substitute_args("$ARGUMENTS", &args(&["$$", "$&", "x"])),
            "$ $ARGUMENTS x"
        );
        assert_eq!(substitute_args("a$@b", &args(&["$`", "$'"])), "aa bb");
    }

    #[test]
    fn expansion_of_message_text() {
        let t = vec![
            template("fix", "Fix $1 because ${@:2}"),
            template("plain", "Body"),
        ];
        assert_eq!(
            expand_template(r#"/fix a.ts "too slow" now"#, &t),
            "Fix a.ts because too slow now"
        );
        assert_eq!(expand_template("/plain", &t), "Body");
        assert_eq!(expand_template("/unknown x", &t), "/unknown x");
        assert_eq!(expand_template("fix a", &t), "fix a");
        // Only a space ends the name: a tab keeps it part of the name.
        assert_eq!(expand_template("/plain\tx", &t), "/plain\tx");
    }

    #[test]
    fn template_files_load_description_and_hint() {
        let dir = std::env::temp_dir().join(format!("pi-rs-tpl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let long = "x".repeat(70);
        std::fs::write(dir.join("a.md"), format!("\n\n{long}\nmore\n")).unwrap();
        std::fs::write(
            dir.join("b.md"),
            "---\ndescription: Bee\nargument-hint: <file>\n---\n\n Body $1 \n",
        )
        .unwrap();
        std::fs::write(dir.join("c.txt"), "not a template").unwrap();
        let mut warnings = Vec::new();
        let loaded = load_templates_from_dir(&dir, &|_| SourceInfo::default(), &mut warnings);
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded[0].name, "a");
        assert_eq!(loaded[0].description, format!("{}...", "x".repeat(60)));
        assert_eq!(loaded[0].content, format!("\n\n{long}\nmore\n"));
        assert_eq!(loaded[1].description, "Bee");
        assert_eq!(loaded[1].argument_hint.as_deref(), Some("<file>"));
        assert_eq!(loaded[1].content, "Body $1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    /// Expected strings produced by pi 0.73.1's own `expandPromptTemplate` under Node.
    #[test]
    fn expansions_match_pi_byte_for_byte() {
        let templates = vec![
            template("fix", "Fix $1 because ${@:2} [$ARGUMENTS] {$@}"),
            template(
                "all",
                "$1|$2|$3|$10|$0|${@:0}|${@:1:1}|${@:2:0}|${@:3:5}|${@:}|${@:2:}|$ARGUMENTSX|$@@|$$1",
            ),
            template("uni", "é $1 ü ${@:2} 😀 $ARGUMENTS"),
            template("empty", ""),
        ];
        for (input, expected) in [
            (
                "/fix a.ts \"too slow\" now",
                "Fix a.ts because too slow now [a.ts too slow now] {a.ts too slow now}",
            ),
            ("/all", "|||||||||${@:}|${@:2:}|X|@|$"),
            (
                "/all a b c d e f g h i j k",
                "a|b|c|j||a b c d e f g h i j k|a||c d e f g|${@:}|${@:2:}|a b c d e f g h i j kX|a b c d e f g h i j k@|$a",
            ),
            (
                "/all '$1' \"$@\" '${@:1}' $ARGUMENTS",
                "$1|$1 $@ ${@:1} $ARGUMENTS|$1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $ARGUMENTS|||$1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $ARGUMENTS|$1||${@:1} $1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $ARGUMENTS|${@:}|${@:2:}|$1 $1 $@ ${@:1} $ARGUMENTS ${@:1} $ARGUMENTSX|$1 $@ ${@:1} $ARGUMENTS@|$$1",
            ),
            (
                "/all $$ $& $` $' x",
                "$$|$&|$`|||$$ $& $` $ x|$$||$` $ x|${@:}|${@:2:}|$ $ARGUMENTS $$|$&|$`|||$$ $& $` $ x|$$||$` $ x|${@:}|${@:2:}| $ xX|$ $@ $$|$&|$`|||$$ $& $` $ x|$$||$` $ x|${@:}|${@:2:}|$ $ARGUMENTS $$|$&|$`|||$$ $& $` $ x|$$||$` $ x|${@:}|${@:2:}| $ xX| $ x@|$$$",
            ),
            ("/uni ü 'é x' 😀", "é ü ü é x 😀 😀 ü é x 😀"),
            ("/empty a b", ""),
            ("/fix", "Fix  because  [] {}"),
            ("/fix  ", "Fix  because  [] {}"),
            ("/fix\ta b", "/fix\ta b"),
            ("/unknown a", "/unknown a"),
            ("fix a", "fix a"),
            ("/", "/"),
            (
                "/fix 'unterminated quote",
                "Fix unterminated quote because  [unterminated quote] {unterminated quote}",
            ),
            (
                "/all a\"b c\"d 'e'f",
                "ab cd|ef||||ab cd ef|ab cd|||${@:}|${@:2:}|ab cd efX|ab cd ef@|$ab cd",
            ),
        ] {
            assert_eq!(
                expand_template(input, &templates),
                expected,
                "input {input:?}"
            );
        }
    }
    /// Placeholders cut at every position, next to multi-byte text, never panic.
    #[test]
    fn odd_templates_never_panic() {
        let content = "é${@:1:2}ü$1😀${@:2}$ARGUMENTS$@$$&${@:}${@:9999999999999999999999:1}$";
        let a = args(&["é", "$`", "😀"]);
        for end in 0..=content.len() {
            if content.is_char_boundary(end) {
                let _ = substitute_args(&content[..end], &a);
                let _ = substitute_args(&content[end..], &a);
            }
        }
    }
}
