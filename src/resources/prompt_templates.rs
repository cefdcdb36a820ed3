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

/// Whitespace as JavaScript's `\s` reads it (Unicode white space plus U+FEFF).
fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{FEFF}'
}

/// Splits template arguments as pi 1.6.0 does: on white space; a `"` or `'` opens a quoted
/// argument only at the start of one (so apostrophes inside words stay: `don't` is one word),
/// `\"` inside `"…"` (and `\'` inside `'…'`) is the quote itself, `""` is an empty argument, and
/// an unclosed quote is literal text (the rest is split as usual).
pub fn parse_command_args(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut args = Vec::new();
    let mut current = String::new();
    let mut has_token = false;
    let mut in_quote: Option<char> = None;
    let mut quote_start = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match in_quote {
            Some(q) if c == '\\' && chars.get(i + 1) == Some(&q) => {
                current.push(q);
                i += 1;
            }
            Some(q) if c == q => in_quote = None,
            Some(_) => current.push(c),
            None if (c == '"' || c == '\'') && !has_token => {
                in_quote = Some(c);
                quote_start = i;
                has_token = true;
            }
            None if is_js_space(c) => {
                if has_token {
                    args.push(std::mem::take(&mut current));
                    has_token = false;
                }
            }
            None => {
                current.push(c);
                has_token = true;
            }
        }
        if in_quote.is_some() && i + 1 >= chars.len() {
            // Unclosed: the quote is text and what followed it is read again unquoted.
            in_quote = None;
            current = chars[quote_start].to_string();
            i = quote_start;
        }
        i += 1;
    }
    if has_token {
        args.push(current);
    }
    args
}

/// Substitutes the placeholders in one left-to-right pass, as pi 1.6.0 does (a substituted value
/// is never read again): `${N:-default}`, `${@:-default}` / `${ARGUMENTS:-default}` (the default
/// when the value is missing or empty), `${@:N}` / `${@:N:L}` (1-based, 0 counts as 1), `$@` /
/// `$ARGUMENTS` (all arguments), `$N` (missing → empty).
pub fn substitute_args(content: &str, args: &[String]) -> String {
    let all_args = args.join(" ");
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let at = &rest[dollar..];
        match placeholder(at, args, &all_args) {
            Some((len, value)) => {
                out.push_str(&value);
                rest = &at[len..];
            }
            None => {
                out.push('$');
                rest = &at[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The placeholder at the start of `text` (which starts with `$`): (its length, its value).
fn placeholder(text: &str, args: &[String], all_args: &str) -> Option<(usize, String)> {
    let positional = |digits: &str| -> Option<&String> {
        digits
            .parse::<usize>()
            .ok()?
            .checked_sub(1)
            .and_then(|k| args.get(k))
    };
    if let Some(inner) = text.strip_prefix("${") {
        // ${N:-default}, ${@:-default}, ${ARGUMENTS:-default}
        let target_len = if inner.starts_with("ARGUMENTS") {
            "ARGUMENTS".len()
        } else if inner.starts_with('@') {
            1
        } else {
            digit_run(inner)
        };
        if target_len > 0
            && let Some(after) = inner[target_len..].strip_prefix(":-")
            && let Some(close) = after.find('}')
        {
            let target = &inner[..target_len];
            let value = match target {
                "@" | "ARGUMENTS" => Some(all_args),
                digits => positional(digits).map(String::as_str),
            };
            let default = &after[..close];
            let chosen = value.filter(|v| !v.is_empty()).unwrap_or(default);
            let len = 2 + target_len + 2 + close + 1;
            return Some((len, chosen.to_string()));
        }
        // ${@:N} and ${@:N:L}
        let slice = inner.strip_prefix("@:")?;
        let n = digit_run(slice);
        if n == 0 {
            return None;
        }
        let start = parse_index(&slice[..n]).saturating_sub(1);
        let mut used = n;
        let mut length = None;
        if let Some(after) = slice[n..].strip_prefix(':') {
            let l = digit_run(after);
            if l == 0 {
                return None;
            }
            length = Some(parse_index(&after[..l]));
            used += 1 + l;
        }
        if !slice[used..].starts_with('}') {
            return None;
        }
        let from = start.min(args.len());
        let to = length.map_or(args.len(), |l| from.saturating_add(l).min(args.len()));
        return Some((4 + used + 1, args[from..to].join(" ")));
    }
    let body = &text[1..];
    if body.starts_with("ARGUMENTS") {
        return Some((1 + "ARGUMENTS".len(), all_args.to_string()));
    }
    if body.starts_with('@') {
        return Some((2, all_args.to_string()));
    }
    let n = digit_run(body);
    (n > 0).then(|| {
        let value = positional(&body[..n]).cloned().unwrap_or_default();
        (1 + n, value)
    })
}

/// Parses a run of ASCII digits; values too large to index anything become `usize::MAX`.
fn parse_index(digits: &str) -> usize {
    digits.parse::<usize>().unwrap_or(usize::MAX)
}

/// How many ASCII digits `text` starts with.
fn digit_run(text: &str) -> usize {
    text.bytes().take_while(u8::is_ascii_digit).count()
}

/// Expands `/name args` when `name` is a template (the name runs to the first white space); any
/// other text comes back unchanged.
pub fn expand_template(text: &str, templates: &[PromptTemplate]) -> String {
    let Some(rest) = text.strip_prefix('/') else {
        return text.to_string();
    };
    let name_end = rest.find(is_js_space).unwrap_or(rest.len());
    let name = &rest[..name_end];
    let args = rest[name_end..].trim_start_matches(is_js_space);
    match templates
        .iter()
        .find(|t| !name.is_empty() && t.name == name)
    {
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
    fn arguments_split_as_pi_1_6() {
        assert_eq!(
            parse_command_args(r#"a.ts "too slow" now"#),
            args(&["a.ts", "too slow", "now"])
        );
        assert_eq!(parse_command_args("don't stop"), args(&["don't", "stop"]));
        assert_eq!(parse_command_args(r#"a "" ''"#), args(&["a", "", ""]));
        assert_eq!(
            parse_command_args(r#""say \"hi\"" 'it\'s'"#),
            args(&["say \"hi\"", "it's"])
        );
        assert_eq!(
            parse_command_args("x 'unclosed rest"),
            args(&["x", "'unclosed", "rest"])
        );
        assert_eq!(parse_command_args("a \""), args(&["a", "\""]));
        assert!(parse_command_args(" \t ").is_empty());
    }

    #[test]
    fn one_pass_substitution() {
        let a = args(&["a.ts", "too slow", "now"]);
        assert_eq!(substitute_args("$1|${@:2}", &a), "a.ts|too slow now");
        assert_eq!(substitute_args("${4:-four}|${1:-x}", &a), "four|a.ts");
        // A substituted value is never read again.
        assert_eq!(substitute_args("$1 $2", &args(&["$2", "b"])), "$2 b");
        assert_eq!(substitute_args("$@", &args(&["$&", "$1"])), "$& $1");
        assert_eq!(substitute_args("$99999999999999999999999", &a), "");
    }

    /// Expected strings produced by pi 1.6.0's own `expandPromptTemplate` under Node.
    #[test]
    fn expansions_match_pi_1_6_byte_for_byte() {
        let templates = vec![
            template("fix", "Fix $1 because ${@:2} [$ARGUMENTS] {$@}"),
            template(
                "all",
                "$1|$2|$3|$10|$0|${@:0}|${@:1:1}|${@:2:0}|${@:3:5}|${@:}|${@:2:}|$ARGUMENTSX|$@@|$$1",
            ),
            template(
                "def",
                "<${1:-one}|${2:-two}|${@:-none}|${ARGUMENTS:-nada}|${0:-zero}|${1:-}|${3:-a}b}|${ARGUMENTS:2}|${9999999999999999999:-big}>",
            ),
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
                "$1|$@|${@:1}|||$1 $@ ${@:1} $ARGUMENTS|$1||${@:1} $ARGUMENTS|${@:}|${@:2:}|$1 $@ ${@:1} $ARGUMENTSX|$1 $@ ${@:1} $ARGUMENTS@|$$1",
            ),
            (
                "/all $$ $& $` $' x",
                "$$|$&|$`|||$$ $& $` $' x|$$||$` $' x|${@:}|${@:2:}|$$ $& $` $' xX|$$ $& $` $' x@|$$$",
            ),
            ("/def", "<one|two|none|nada|zero||ab}|${ARGUMENTS:2}|big>"),
            ("/def x", "<x|two|x|x|zero|x|ab}|${ARGUMENTS:2}|big>"),
            ("/def \"\" y", "<one|y| y| y|zero||ab}|${ARGUMENTS:2}|big>"),
            (
                "/def don't stop",
                "<don't|stop|don't stop|don't stop|zero|don't|ab}|${ARGUMENTS:2}|big>",
            ),
            (
                "/def it's 'quoted arg' \"say \\\"hi\\\"\"",
                "<it's|quoted arg|it's quoted arg say \"hi\"|it's quoted arg say \"hi\"|zero|it's|say \"hi\"b}|${ARGUMENTS:2}|big>",
            ),
            (
                "/def 'unclosed rest of it",
                "<'unclosed|rest|'unclosed rest of it|'unclosed rest of it|zero|'unclosed|ofb}|${ARGUMENTS:2}|big>",
            ),
            (
                "/def a \"b",
                "<a|\"b|a \"b|a \"b|zero|a|ab}|${ARGUMENTS:2}|big>",
            ),
            ("/def\tx\ty", "<x|y|x y|x y|zero|x|ab}|${ARGUMENTS:2}|big>"),
            (
                "/def   spaced   out  ",
                "<spaced|out|spaced out|spaced out|zero|spaced|ab}|${ARGUMENTS:2}|big>",
            ),
            ("/fix", "Fix  because  [] {}"),
            ("/ x", "/ x"),
            ("/", "/"),
            (
                "/def a'b'c \"\" ''",
                "<a'b'c|two|a'b'c  |a'b'c  |zero|a'b'c|ab}|${ARGUMENTS:2}|big>",
            ),
            (
                "/def 'it\\'s' x",
                "<it's|x|it's x|it's x|zero|it's|ab}|${ARGUMENTS:2}|big>",
            ),
        ] {
            assert_eq!(
                expand_template(input, &templates),
                expected,
                "input {input:?}"
            );
        }
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
