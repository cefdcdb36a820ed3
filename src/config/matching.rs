//! String matching helpers used by model resolution and `--list-models`:
//! - `locale_compare`: the ordering JavaScript's `a.localeCompare(b)` gives (ICU root collation)
//!   for the ASCII strings model ids and provider names are made of;
//! - `glob_match`: the subset of minimatch that `--models` / `enabledModels` patterns use
//!   (`*`, `?`, `[...]`, `{a,b}`, `**`; `/` separates segments; case-insensitive);
//! - `fuzzy_matches`: the "all query characters in order" filter of `--list-models <search>`.
//!
//! Pure functions over `&str`; no allocation beyond small vectors.

use std::cmp::Ordering;

/// ASCII characters in ICU root collation order (punctuation < symbols < digits < letters).
/// Upper/lower case pairs share a primary weight; lowercase sorts first at the tertiary level.
const ICU_ASCII_ORDER: &str =
    " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

fn primary_weight(c: char) -> u32 {
    if c.is_ascii() {
        let lower = c.to_ascii_lowercase();
        if let Some(pos) = ICU_ASCII_ORDER.find(lower) {
            return pos as u32 + 1;
        }
        // Control characters: ICU ignores them entirely; give them the lowest weight.
        return 0;
    }
    // Non-ASCII: after every ASCII character, by code point (good enough for ids and names).
    0x100 + c as u32
}

/// `a.localeCompare(b)` for ASCII strings: compare case-insensitively first, then lowercase
/// before uppercase at the first difference.
pub fn locale_compare(a: &str, b: &str) -> Ordering {
    let primary = a
        .chars()
        .map(primary_weight)
        .filter(|w| *w != 0)
        .cmp(b.chars().map(primary_weight).filter(|w| *w != 0));
    if primary != Ordering::Equal {
        return primary;
    }
    let tertiary = |c: char| u8::from(c.is_ascii_uppercase());
    a.chars()
        .map(tertiary)
        .cmp(b.chars().map(tertiary))
        .then_with(|| a.cmp(b))
}

// ---- globs -------------------------------------------------------------------------------------

/// True when `text` matches the minimatch-style `pattern`, ignoring case.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let text = text.to_lowercase();
    let text_segments: Vec<&str> = text.split('/').collect();
    expand_braces(&pattern.to_lowercase()).iter().any(|p| {
        let pattern_segments: Vec<&str> = p.split('/').collect();
        match_segments(&pattern_segments, &text_segments)
    })
}

/// `{a,b}` alternatives expanded into separate patterns (nested braces handled recursively).
fn expand_braces(pattern: &str) -> Vec<String> {
    let bytes = pattern.as_bytes();
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_string()];
    };
    let mut depth = 0;
    let mut close = None;
    let mut commas = Vec::new();
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            b',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let Some(close) = close else {
        return vec![pattern.to_string()];
    };
    if commas.is_empty() {
        // `{x}` is literal in minimatch; keep it and expand what follows.
        let head = &pattern[..=close];
        return expand_braces(&pattern[close + 1..])
            .into_iter()
            .map(|tail| format!("{head}{tail}"))
            .collect();
    }
    let prefix = &pattern[..open];
    let suffix = &pattern[close + 1..];
    let mut bounds = vec![open];
    bounds.extend(&commas);
    bounds.push(close);
    let mut out = Vec::new();
    for pair in bounds.windows(2) {
        let alternative = &pattern[pair[0] + 1..pair[1]];
        out.extend(expand_braces(&format!("{prefix}{alternative}{suffix}")));
    }
    out
}

fn match_segments(pattern: &[&str], text: &[&str]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((&"**", rest)) => (0..=text.len()).any(|skip| match_segments(rest, &text[skip..])),
        Some((first, rest)) => match text.split_first() {
            Some((segment, text_rest)) => {
                let p: Vec<char> = first.chars().collect();
                let t: Vec<char> = segment.chars().collect();
                match_segment(&p, &t) && match_segments(rest, text_rest)
            }
            None => false,
        },
    }
}

/// One path segment: `*` any run, `?` one char, `[...]` a class (`!`/`^` negates, ranges).
fn match_segment(p: &[char], t: &[char]) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some('*') => (0..=t.len()).any(|skip| match_segment(&p[1..], &t[skip..])),
        Some('?') => !t.is_empty() && match_segment(&p[1..], &t[1..]),
        Some('[') => match parse_class(&p[1..]) {
            Some((class, used)) => {
                !t.is_empty() && class.matches(t[0]) && match_segment(&p[1 + used..], &t[1..])
            }
            // An unclosed `[` is an ordinary character.
            None => t.first() == Some(&'[') && match_segment(&p[1..], &t[1..]),
        },
        Some('\\') if p.len() > 1 => t.first() == Some(&p[1]) && match_segment(&p[2..], &t[1..]),
        Some(c) => t.first() == Some(c) && match_segment(&p[1..], &t[1..]),
    }
}

struct CharClass {
    negated: bool,
    ranges: Vec<(char, char)>,
}

impl CharClass {
    fn matches(&self, c: char) -> bool {
        self.ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != self.negated
    }
}

/// Parses the class body after `[`; returns the class and how many chars it used (incl. `]`).
fn parse_class(p: &[char]) -> Option<(CharClass, usize)> {
    let mut i = 0;
    let negated = matches!(p.first(), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < p.len() {
        let c = p[i];
        if c == ']' && !first {
            return Some((CharClass { negated, ranges }, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            ranges.push((c, p[i + 2]));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    None
}

// ---- fuzzy filter --------------------------------------------------------------------------------

/// The `--list-models <search>` filter: every whitespace-separated token must match `text`
/// (its characters appear in order, case-insensitively; a `letters+digits` token may also
/// match with the two halves swapped, e.g. `5gpt`).
pub fn fuzzy_matches(query: &str, text: &str) -> bool {
    query
        .split_whitespace()
        .all(|token| fuzzy_token_matches(token, text))
}

fn fuzzy_token_matches(token: &str, text: &str) -> bool {
    let token = token.to_lowercase();
    let text = text.to_lowercase();
    if chars_in_order(&token, &text) {
        return true;
    }
    let split =
        token.find(|c: char| c.is_ascii_digit() != token.starts_with(|d: char| d.is_ascii_digit()));
    let Some(split) = split else {
        return false;
    };
    let (head, tail) = token.split_at(split);
    let all = |s: &str, digits: bool| {
        !s.is_empty()
            && s.chars().all(|c| {
                if digits {
                    c.is_ascii_digit()
                } else {
                    c.is_ascii_lowercase()
                }
            })
    };
    let head_digits = head.starts_with(|c: char| c.is_ascii_digit());
    if all(head, head_digits) && all(tail, !head_digits) {
        return chars_in_order(&format!("{tail}{head}"), &text);
    }
    false
}

fn chars_in_order(query: &str, text: &str) -> bool {
    let mut text_chars = text.chars();
    query.chars().all(|q| text_chars.any(|t| t == q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locale_compare_matches_icu_for_ascii() {
        // Expected order produced by node's `localeCompare` (ICU root collation).
        let mut v = vec![
            "ab", "a.b", "A-b", "a-B", "a-b", "a_b", "a b", "a1", "a10", "a9", "Z", "b",
        ];
        v.sort_by(|a, b| locale_compare(a, b));
        assert_eq!(
            v,
            vec![
                "a b", "a_b", "a-b", "a-B", "A-b", "a.b", "a1", "a10", "a9", "ab", "b", "Z"
            ]
        );
        assert_eq!(locale_compare("gpt-5", "gpt-5"), Ordering::Equal);
        assert_eq!(locale_compare("claude-3", "claude-3-5"), Ordering::Less);
    }

    #[test]
    fn globs_follow_minimatch_segments() {
        assert!(glob_match("*sonnet*", "claude-sonnet-4-5"));
        assert!(!glob_match("*sonnet*", "anthropic/claude-sonnet-4-5"));
        assert!(glob_match("anthropic/*", "anthropic/claude-sonnet-4-5"));
        assert!(glob_match(
            "ANTHROPIC/Claude-*",
            "anthropic/claude-opus-4-7"
        ));
        assert!(!glob_match(
            "openrouter/*",
            "openrouter/moonshotai/kimi-k2.6"
        ));
        assert!(glob_match(
            "openrouter/**",
            "openrouter/moonshotai/kimi-k2.6"
        ));
        assert!(glob_match("gpt-5.?", "gpt-5.4"));
        assert!(glob_match("gpt-[45]*", "gpt-4o"));
        assert!(!glob_match("gpt-[!45]*", "gpt-4o"));
        assert!(glob_match("{openai,anthropic}/*", "openai/gpt-5.4"));
        assert!(glob_match("[a-c]*", "claude"));
        assert!(glob_match("x[", "x["));
    }

    #[test]
    fn fuzzy_needs_every_token_in_order() {
        assert!(fuzzy_matches("ant opus", "anthropic claude-opus-4-7"));
        assert!(fuzzy_matches("gpt54", "openai gpt-5.4"));
        assert!(!fuzzy_matches("zzz", "openai gpt-5.4"));
        assert!(fuzzy_matches("5gpt", "openai gpt-5.4"));
        assert!(fuzzy_matches("", "anything"));
    }
}
