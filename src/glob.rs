//! The one glob matcher. Every caller that matches a `/`-separated path or a name against a glob
//! compiles it here: `--models`/`enabledModels` patterns (pi's minimatch), the find and grep
//! fallbacks (fd's and rg's globset), and ignore files (gitignore rules, read by the `ignore`
//! module).
//!
//! What the three dialects share, and so what every [`Glob`] does: `*` is any run of characters
//! but `/`; `?` one character but `/`; `[abc]`, `[a-z]`, `[!x]`/`[^x]` a class (never `/`; a `]`
//! right after the opening `[` is a member; an unclosed `[` is an ordinary character); `\x` is a
//! literal `x`. `**` as a whole segment spans segments: `**/` at the start or `/**/` inside is
//! zero or more whole segments (`a/**/b` matches `a/b` and `a/x/y/b`, not `a/xb`), a trailing
//! `/**` is everything below (`a/**` does not match `a`), `**` alone is everything; a `**` inside
//! a segment (`a**b`) is a `*`. Where the dialects really differ, [`GlobOptions`] says which
//! rule a caller wants: case folding and how `{a,b}` is read.
//!
//! Known differences from the references, all on patterns nobody writes: minimatch's `{1..3}`
//! ranges and its "no dot files for `*`" rule are not implemented, `*` may match an empty segment
//! (`a/*/b` matches `a//b`), and the `ignore` package never matches a pattern with an unclosed
//! `[` where we read the `[` literally.
//!
//! [`wildcard_match`] is the other dialect, for names and command lines where `/` is nothing
//! special: approval rules and MCP tool patterns.
//!
//! Pure: compile once with [`Glob::new`], then [`Glob::matches`] any number of texts. Matching
//! never backtracks exponentially (patterns may come from the model).

/// How `{` in a pattern is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Braces {
    /// gitignore (the `ignore` package, git, fd's and rg's ignore files): `{` is an ordinary
    /// character.
    Literal,
    /// fd's and rg's globset: `{a,b}` is either alternative, `{a}` is `a`, nesting allowed.
    Alternatives,
    /// minimatch's brace expansion: a list with a comma expands (`{a,b}`, `a{,b}`), a single
    /// item `{a}` stays literal.
    Lists,
}

/// The semantics a caller needs where the dialects differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobOptions {
    /// Compare case-insensitively (both sides lowercased).
    pub ignore_case: bool,
    pub braces: Braces,
}

impl GlobOptions {
    /// pi's `minimatch(text, pattern, { nocase: true })` (model patterns).
    pub const MINIMATCH_NOCASE: GlobOptions = GlobOptions {
        ignore_case: true,
        braces: Braces::Lists,
    };
    /// fd's and rg's `--glob` (globset), case-sensitive.
    pub const GLOBSET: GlobOptions = GlobOptions {
        ignore_case: false,
        braces: Braces::Alternatives,
    };
    /// A gitignore line, case-sensitive as git, fd and rg read it.
    pub const GITIGNORE: GlobOptions = GlobOptions {
        ignore_case: false,
        braces: Braces::Literal,
    };

    /// The same options with case folding on or off.
    pub const fn ignore_case(self, ignore_case: bool) -> GlobOptions {
        GlobOptions {
            ignore_case,
            braces: self.braces,
        }
    }
}

/// A compiled glob: one token list per brace alternative.
#[derive(Clone, Debug)]
pub struct Glob {
    alternatives: Vec<Vec<Token>>,
    ignore_case: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Char(char),
    /// `?`
    AnyChar,
    /// `*` (and a `**` inside a segment)
    Star,
    /// `[...]`
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `**/` at the start, or the `**/` of `/**/`: empty, or any text that ends with `/`.
    AnySegments,
    /// A trailing `**` after `/` (or a pattern that is only `**`): any text.
    Everything,
}

impl Glob {
    pub fn new(pattern: &str, options: GlobOptions) -> Glob {
        let pattern = if options.ignore_case {
            pattern.to_lowercase()
        } else {
            pattern.to_string()
        };
        let expanded = match options.braces {
            Braces::Literal => vec![pattern],
            Braces::Alternatives => expand_braces(&pattern, true),
            Braces::Lists => expand_braces(&pattern, false),
        };
        Glob {
            alternatives: expanded.iter().map(|p| tokenize(p)).collect(),
            ignore_case: options.ignore_case,
        }
    }

    /// Whether the whole of `text` (a name or a `/`-separated relative path) matches.
    pub fn matches(&self, text: &str) -> bool {
        let folded;
        let text = if self.ignore_case {
            folded = text.to_lowercase();
            &folded
        } else {
            text
        };
        let text: Vec<char> = text.chars().collect();
        self.alternatives
            .iter()
            .any(|tokens| match_tokens(tokens, &text))
    }
}

/// `{a,b}` alternatives expanded into separate patterns, nested braces recursively. A `{` without
/// its `}` is literal; so is a single-item `{a}` unless `single_expands`. A `\` escapes a brace.
fn expand_braces(pattern: &str, single_expands: bool) -> Vec<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 2,
            '{' => break,
            _ => index += 1,
        }
    }
    if index >= chars.len() {
        return vec![pattern.to_string()];
    }
    let open = index;
    let mut depth = 0;
    let mut close = None;
    let mut commas = Vec::new();
    let mut index = open;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 1,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(index);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(index),
            _ => {}
        }
        index += 1;
    }
    let Some(close) = close else {
        return vec![pattern.to_string()];
    };
    let head: String = chars[..open].iter().collect();
    let tail: String = chars[close + 1..].iter().collect();
    if commas.is_empty() && !single_expands {
        // minimatch keeps `{x}` as written and expands what follows it.
        let literal: String = chars[..=close].iter().collect();
        return expand_braces(&tail, single_expands)
            .into_iter()
            .map(|rest| format!("{literal}{rest}"))
            .collect();
    }
    let mut bounds = vec![open];
    bounds.extend(&commas);
    bounds.push(close);
    let mut out = Vec::new();
    for pair in bounds.windows(2) {
        let middle: String = chars[pair[0] + 1..pair[1]].iter().collect();
        out.extend(expand_braces(
            &format!("{head}{middle}{tail}"),
            single_expands,
        ));
    }
    out
}

fn tokenize(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let at_segment_start = index == 0 || chars[index - 1] == '/';
        match chars[index] {
            '*' if chars.get(index + 1) == Some(&'*') => {
                let end = index + 2;
                if at_segment_start && end == chars.len() {
                    tokens.push(Token::Everything);
                    index = end;
                } else if at_segment_start && chars.get(end) == Some(&'/') {
                    tokens.push(Token::AnySegments);
                    index = end + 1;
                } else {
                    // Inside a segment every dialect reads `**` as `*`.
                    while chars.get(index) == Some(&'*') {
                        index += 1;
                    }
                    tokens.push(Token::Star);
                }
            }
            '*' => {
                tokens.push(Token::Star);
                index += 1;
            }
            '?' => {
                tokens.push(Token::AnyChar);
                index += 1;
            }
            '[' => match parse_class(&chars[index + 1..]) {
                Some((token, used)) => {
                    tokens.push(token);
                    index += 1 + used;
                }
                None => {
                    tokens.push(Token::Char('['));
                    index += 1;
                }
            },
            '\\' if index + 1 < chars.len() => {
                tokens.push(Token::Char(chars[index + 1]));
                index += 2;
            }
            c => {
                tokens.push(Token::Char(c));
                index += 1;
            }
        }
    }
    tokens
}

/// The class body after `[`: the token and how many characters it used (with the `]`), or `None`
/// when it is not closed.
fn parse_class(body: &[char]) -> Option<(Token, usize)> {
    let mut index = 0;
    let negated = matches!(body.first(), Some('!') | Some('^'));
    if negated {
        index += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while index < body.len() {
        let mut c = body[index];
        if c == ']' && !first {
            return Some((Token::Class { negated, ranges }, index + 1));
        }
        first = false;
        if c == '\\' && index + 1 < body.len() {
            index += 1;
            c = body[index];
        }
        if index + 2 < body.len() && body[index + 1] == '-' && body[index + 2] != ']' {
            ranges.push((c, body[index + 2]));
            index += 3;
        } else {
            ranges.push((c, c));
            index += 1;
        }
    }
    None
}

/// Whether `tokens` match the whole of `text`. Each (token, text position) pair is tried at most
/// once (`failed` remembers the ones that did not match), so a model's `*a*a*a*…b` costs
/// tokens × characters², not an exponential backtrack.
fn match_tokens(tokens: &[Token], text: &[char]) -> bool {
    let mut failed = vec![false; (tokens.len() + 1) * (text.len() + 1)];
    match_from(tokens, text, 0, 0, &mut failed)
}

fn match_from(tokens: &[Token], text: &[char], t: usize, x: usize, failed: &mut [bool]) -> bool {
    let state = t * (text.len() + 1) + x;
    if failed[state] {
        return false;
    }
    let rest = &text[x..];
    let matched = match tokens.get(t) {
        None => rest.is_empty(),
        Some(Token::Everything) => true,
        Some(Token::AnySegments) => {
            match_from(tokens, text, t + 1, x, failed)
                || (x..text.len())
                    .any(|i| text[i] == '/' && match_from(tokens, text, t + 1, i + 1, failed))
        }
        Some(Token::Star) => {
            let end = rest
                .iter()
                .position(|c| *c == '/')
                .map_or(text.len(), |p| x + p);
            (x..=end).any(|i| match_from(tokens, text, t + 1, i, failed))
        }
        Some(Token::AnyChar) => {
            rest.first().is_some_and(|c| *c != '/')
                && match_from(tokens, text, t + 1, x + 1, failed)
        }
        Some(Token::Class { negated, ranges }) => {
            rest.first().is_some_and(|&c| {
                c != '/' && ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
            }) && match_from(tokens, text, t + 1, x + 1, failed)
        }
        Some(Token::Char(c)) => {
            rest.first() == Some(c) && match_from(tokens, text, t + 1, x + 1, failed)
        }
    };
    if !matched {
        failed[state] = true;
    }
    matched
}

/// Plain wildcards, for names and command lines where `/` is an ordinary character: `*` is any
/// run of characters, `?` (when `question_mark` is set) any one character, everything else is
/// literal, and the whole text must match. Approval rules use both (`?` included), MCP tool
/// patterns only `*`. Iterative backtracking over the last `*`: linear in practice, never
/// exponential, as patterns come from settings and texts from the model.
pub fn wildcard_match(pattern: &str, text: &str, question_mark: bool) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    // Position after the last `*` and the text position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let one = pattern
            .get(p)
            .is_some_and(|c| (question_mark && *c == '?') || (*c != '*' && *c == text[t]));
        if one {
            p += 1;
            t += 1;
        } else if pattern.get(p) == Some(&'*') {
            star = Some((p + 1, t));
            p += 1;
        } else if let Some((after_star, tried)) = star {
            p = after_star;
            t = tried + 1;
            star = Some((after_star, tried + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimatch(pattern: &str, text: &str) -> bool {
        Glob::new(pattern, GlobOptions::MINIMATCH_NOCASE).matches(text)
    }

    fn globset(pattern: &str, text: &str) -> bool {
        Glob::new(pattern, GlobOptions::GLOBSET).matches(text)
    }

    fn gitignore(pattern: &str, text: &str) -> bool {
        Glob::new(pattern, GlobOptions::GITIGNORE).matches(text)
    }

    /// Expectations from `minimatch(text, pattern, { nocase: true })` of minimatch 10.2.6 (the
    /// version pi 0.73.1 ships), as `resolve.rs` uses it for `--models` and `enabledModels`.
    #[test]
    fn minimatch_model_patterns() {
        let cases = [
            ("*sonnet*", "claude-sonnet-4-5", true),
            ("*sonnet*", "anthropic/claude-sonnet-4-5", false),
            ("anthropic/*", "anthropic/claude-sonnet-4-5", true),
            ("ANTHROPIC/Claude-*", "anthropic/claude-opus-4-7", true),
            ("openrouter/*", "openrouter/moonshotai/kimi-k2.6", false),
            ("openrouter/**", "openrouter/moonshotai/kimi-k2.6", true),
            ("openrouter/**", "openrouter", false),
            ("gpt-5.?", "gpt-5.4", true),
            ("gpt-[45]*", "gpt-4o", true),
            ("gpt-[!45]*", "gpt-4o", false),
            ("{openai,anthropic}/*", "openai/gpt-5.4", true),
            ("[a-c]*", "claude", true),
            ("[A-C]x", "bx", true),
            ("x[", "x[", true),
            ("{x}", "x", false),
            ("{x}", "{x}", true),
            ("a{b}c", "abc", false),
            ("a{,b}", "a", true),
            ("a{,b}", "ab", true),
            ("{a,{b,c}}d", "cd", true),
            ("{a,b", "{a,b", true),
            ("a**", "ab", true),
            ("a**", "a/b", false),
            ("a**b", "axb", true),
            ("*", "a/b", false),
            ("a/**/b", "a/b", true),
            ("a/**/b", "a/xb", false),
            ("a/**/b", "a/x/y/b", true),
            ("a/**/b/**", "a/b/c", true),
            ("**/b", "b", true),
            ("**", "a/b", true),
            ("\\*x", "*x", true),
            ("[]a]", "]", true),
            ("[!a]", "/", false),
            ("a[/]b", "a/b", false),
            ("a?b", "a/b", false),
            ("?", "é", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(minimatch(pattern, text), expected, "{pattern} ~ {text}");
        }
    }

    /// Expectations from fd 8.6 `--glob` (basename, and `--full-path` for patterns with a `/`),
    /// whose globs are the find tool's and rg's `--glob`.
    #[test]
    fn globset_tool_patterns() {
        let cases = [
            ("*.rs", "main.rs", true),
            ("*.rs", "src/main.rs", false),
            ("**/*.rs", "main.rs", true),
            ("**/*.rs", "src/a/main.rs", true),
            ("src/**/*.spec.ts", "src/a/b/x.spec.ts", true),
            ("src/**/*.spec.ts", "src/x.spec.ts", true),
            ("src/**", "src/a/b.rs", true),
            ("src/**", "src", false),
            ("*.{ts,js}", "a.js", true),
            ("*.{rs}", "b.rs", true),
            ("{x}", "x", true),
            ("file?.[ch]", "file1.h", true),
            ("file?.[!ch]", "file1.h", false),
            ("[a-c]*", "banana", true),
            ("[!a]*", "x", true),
            ("**", "any/thing", true),
            ("a*", "b", false),
            ("a**", "ab", true),
            ("a**", "ab/c", false),
            ("a**b", "axb", true),
            ("a?b", "axb", true),
            ("A*", "a", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(globset(pattern, text), expected, "{pattern} ~ {text}");
        }
        let smart = Glob::new("*.RS", GlobOptions::GLOBSET.ignore_case(true));
        assert!(smart.matches("a.rs"));
    }

    /// Expectations from the `ignore` package (7.0.17) pi's resource loader uses, for whole
    /// patterns (anchoring, negation and directories are `crate::ignore`'s).
    #[test]
    fn gitignore_patterns() {
        let cases = [
            ("docs/**/x.md", "docs/ax.md", false),
            ("docs/**/x.md", "docs/x.md", true),
            ("docs/**/x.md", "docs/a/b/x.md", true),
            ("{a,b}.md", "a.md", false),
            ("{a,b}.md", "{a,b}.md", true),
            ("\\#x", "#x", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("[a-c]?.md", "bx.md", true),
            ("a[/]b", "a/b", false),
            ("x[!/]y", "x/y", false),
            ("?", "é", true),
            ("a**b", "axb", true),
            ("abc/**", "abc/x", true),
            ("sub/*.md", "sub/deeper/x.md", false),
            ("sub/**/*.md", "sub/x.md", true),
            ("*.md", "a/b.md", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(gitignore(pattern, text), expected, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn stars_do_not_backtrack_exponentially() {
        let pattern = "*a".repeat(30) + "b";
        let text = "a".repeat(200);
        assert!(!Glob::new(&pattern, GlobOptions::GLOBSET).matches(&text));
        assert!(Glob::new(&pattern, GlobOptions::GLOBSET).matches(&(text + "b")));
    }

    /// Approval rules (`?` on) and MCP tool patterns (`?` literal): `/` is nothing special.
    #[test]
    fn wildcards() {
        assert!(wildcard_match("mcp__radius__*", "mcp__radius__ping", false));
        assert!(wildcard_match("get_*", "get_", false));
        assert!(wildcard_match("*_item*x", "get_item_box", false));
        assert!(!wildcard_match("get_*", "set_x", false));
        assert!(!wildcard_match("a*a", "a", false));
        assert!(
            wildcard_match("exact", "exact", false) && !wildcard_match("exact", "exactly", false)
        );
        assert!(!wildcard_match("a?c", "abc", false));
        assert!(wildcard_match("a?c", "a?c", false));
        assert!(wildcard_match("a?c", "abc", true));
        assert!(wildcard_match("/tmp/*", "/tmp/a/b", true));
        assert!(wildcard_match("git *", "git push --force", true));
        assert!(!wildcard_match("git *", "gitk", true));
        assert!(wildcard_match("*", "", true));
        assert!(!wildcard_match("?", "", true));
        assert!(!wildcard_match(&"*a".repeat(30), &"b".repeat(5000), true));
    }
}
