//! String matching helpers used by model resolution and `--list-models` (model globs are
//! `crate::glob`'s):
//! - `locale_compare`: the ordering JavaScript's `a.localeCompare(b)` gives (ICU root collation)
//!   for the ASCII strings model ids and provider names are made of;
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
    fn fuzzy_needs_every_token_in_order() {
        assert!(fuzzy_matches("ant opus", "anthropic claude-opus-4-7"));
        assert!(fuzzy_matches("gpt54", "openai gpt-5.4"));
        assert!(!fuzzy_matches("zzz", "openai gpt-5.4"));
        assert!(fuzzy_matches("5gpt", "openai gpt-5.4"));
        assert!(fuzzy_matches("", "anything"));
    }
}
