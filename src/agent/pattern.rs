//! A tiny case-insensitive regular-expression matcher (pure), enough for the error classifiers pi
//! defines as regexes (retryable errors, context overflow): literals, `.`, `\d`, `\s`, `[..]`
//! classes, `(?:..)` groups, `|` alternation, `^`, and the quantifiers `?`, `*`, `+`.
//! Backtracking; patterns are short and fixed, inputs are error messages.

#[derive(Debug, Clone)]
enum Atom {
    Char(char),
    Any,
    Digit,
    Space,
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    Group(Vec<Vec<Item>>),
    Start,
}

#[derive(Debug, Clone)]
struct Item {
    atom: Atom,
    min: usize,
    max: usize,
}

/// A compiled pattern. Invalid syntax is a programming error in our own constant patterns.
#[derive(Debug, Clone)]
pub struct Pattern {
    alternatives: Vec<Vec<Item>>,
}

impl Pattern {
    pub fn new(source: &str) -> Pattern {
        let chars: Vec<char> = source.to_lowercase().chars().collect();
        let mut at = 0;
        let alternatives = parse_alternatives(&chars, &mut at);
        assert!(at == chars.len(), "unbalanced pattern {source:?}");
        Pattern { alternatives }
    }

    /// Whether the pattern matches anywhere in `text`, ignoring case.
    pub fn is_match(&self, text: &str) -> bool {
        let text: Vec<char> = text.to_lowercase().chars().collect();
        (0..=text.len()).any(|start| {
            self.alternatives
                .iter()
                .any(|alt| match_items(alt, &text, start, &|_| true))
        })
    }
}

fn parse_alternatives(chars: &[char], at: &mut usize) -> Vec<Vec<Item>> {
    let mut alternatives = vec![Vec::new()];
    while *at < chars.len() {
        let c = chars[*at];
        if c == ')' {
            break;
        }
        *at += 1;
        let atom = match c {
            '|' => {
                alternatives.push(Vec::new());
                continue;
            }
            '.' => Atom::Any,
            '^' => Atom::Start,
            '\\' => {
                let escaped = chars[*at];
                *at += 1;
                match escaped {
                    'd' => Atom::Digit,
                    's' => Atom::Space,
                    other => Atom::Char(other),
                }
            }
            '[' => {
                let negated = chars.get(*at) == Some(&'^');
                if negated {
                    *at += 1;
                }
                let mut ranges = Vec::new();
                while chars[*at] != ']' {
                    let low = chars[*at];
                    if chars.get(*at + 1) == Some(&'-')
                        && chars.get(*at + 2).is_some_and(|c| *c != ']')
                    {
                        ranges.push((low, chars[*at + 2]));
                        *at += 3;
                    } else {
                        ranges.push((low, low));
                        *at += 1;
                    }
                }
                *at += 1;
                Atom::Class { ranges, negated }
            }
            '(' => {
                if chars.get(*at) == Some(&'?') && chars.get(*at + 1) == Some(&':') {
                    *at += 2;
                }
                let inner = parse_alternatives(chars, at);
                assert!(chars.get(*at) == Some(&')'), "unclosed group");
                *at += 1;
                Atom::Group(inner)
            }
            other => Atom::Char(other),
        };
        let (min, max) = match chars.get(*at) {
            Some('?') => (0, 1),
            Some('*') => (0, usize::MAX),
            Some('+') => (1, usize::MAX),
            _ => (1, 1),
        };
        if (min, max) != (1, 1) {
            *at += 1;
        }
        alternatives
            .last_mut()
            .expect("never empty")
            .push(Item { atom, min, max });
    }
    alternatives
}

fn match_items(items: &[Item], text: &[char], pos: usize, cont: &dyn Fn(usize) -> bool) -> bool {
    match items.split_first() {
        None => cont(pos),
        Some((item, rest)) => repeat(item, rest, text, pos, 0, cont),
    }
}

/// Greedy repetition of `item` with backtracking, then the rest of the sequence.
fn repeat(
    item: &Item,
    rest: &[Item],
    text: &[char],
    pos: usize,
    count: usize,
    cont: &dyn Fn(usize) -> bool,
) -> bool {
    if count < item.max
        && match_atom(&item.atom, text, pos, &|next| {
            // An optional repetition must consume input, or `(?:)*` would loop forever.
            (next != pos || count < item.min) && repeat(item, rest, text, next, count + 1, cont)
        })
    {
        return true;
    }
    count >= item.min && match_items(rest, text, pos, cont)
}

fn match_atom(atom: &Atom, text: &[char], pos: usize, cont: &dyn Fn(usize) -> bool) -> bool {
    let current = text.get(pos).copied();
    let single = |accept: bool| accept && cont(pos + 1);
    match atom {
        Atom::Start => pos == 0 && cont(pos),
        Atom::Group(alternatives) => alternatives
            .iter()
            .any(|alt| match_items(alt, text, pos, cont)),
        Atom::Char(c) => single(current == Some(*c)),
        Atom::Any => single(current.is_some_and(|c| c != '\n')),
        Atom::Digit => single(current.is_some_and(|c| c.is_ascii_digit())),
        Atom::Space => single(current.is_some_and(char::is_whitespace)),
        Atom::Class { ranges, negated } => single(current.is_some_and(|c| {
            ranges.iter().any(|(low, high)| (*low..=*high).contains(&c)) != *negated
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pis_classifier_shapes() {
        let p =
            Pattern::new(r"rate.?limit|timed? out|^4(?:00|13)\s*(?:status code)?\s*\(no body\)");
        assert!(p.is_match("429 Rate-Limit reached"));
        assert!(p.is_match("ratelimit"));
        assert!(p.is_match("request time out"));
        assert!(p.is_match("Request timed out"));
        assert!(p.is_match("413 (no body)"));
        assert!(p.is_match("400 status code (no body)"));
        assert!(!p.is_match("x 400 (no body)"));
        assert!(!p.is_match("all fine"));
        let q = Pattern::new(
            r"input token count.*exceeds the maximum|maximum context length is \d+ tokens|context[_ ]length[_ ]exceeded",
        );
        assert!(q.is_match("The input token count (1) exceeds the maximum number"));
        assert!(q.is_match("maximum context length is 8192 tokens"));
        assert!(!q.is_match("maximum context length is tokens"));
        assert!(q.is_match("CONTEXT_LENGTH_EXCEEDED"));
        assert!(
            Pattern::new("prompt too long; exceeded (?:max )?context length")
                .is_match("prompt too long; exceeded context length")
        );
    }
}
