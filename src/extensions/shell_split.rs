//! What the approval gate can see of a bash command line: its simple commands, normalized, and
//! whether anything escaped the splitter. Pure, no IO.
//!
//! The line is tokenized as a POSIX shell would (single and double quotes, backslash escapes,
//! comments, `;` `&&` `||` `|` `|&` `&` and newlines between commands, `(`…`)` subshells and
//! `{`…`}` groups, `if`/`while`/`until` and their `then`/`do`/`else` bodies). Each simple command
//! is then normalized: leading assignments (`FOO=1`) and wrappers (`env`, `command`, `builtin`,
//! `exec`, `time`, `nice`, `nohup`, `timeout`, `sudo`, `doas`, `xargs`, `sh|bash -c '…'`, `eval`)
//! are unwrapped, the command word loses its directory (`/usr/bin/git` → `git`), `git`'s global
//! options (`-C dir`, `-c k=v`, `--no-pager`, …) are dropped, and the words are joined by single
//! spaces with quotes removed (`pu''sh` → `push`).
//!
//! `opaque` is set when the line holds something a pattern cannot be checked against: command or
//! process substitution (`$(…)`, backticks, `<(…)`), here-documents, `\`-newline, an expansion
//! in command position (`$CMD push`), `eval`, `sh -c`, `xargs`, `case`, function definitions, or
//! an unterminated quote. The gate never lets an allow rule pass such a line. This is still not a
//! sandbox: the sandbox is the boundary.

/// A line as the gate sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShellLine {
    /// The normalized simple commands, in order.
    pub commands: Vec<String>,
    /// Something in the line was not seen through (see the module note).
    pub opaque: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// A word with quotes removed; `expanded` when it held an unquoted or double-quoted `$`.
    Word { text: String, expanded: bool },
    /// A command separator or grouping: `;` `&&` `||` `|` `|&` `&` `(` `)`.
    Op,
    /// `(` right after a word: a function definition.
    OpenParen,
}

/// Deepest `sh -c` / `eval` nesting looked into.
const MAX_DEPTH: usize = 4;

pub fn split(line: &str) -> ShellLine {
    let mut out = ShellLine::default();
    split_into(line, 0, &mut out);
    out
}

fn split_into(line: &str, depth: usize, out: &mut ShellLine) {
    if depth > MAX_DEPTH {
        out.opaque = true;
        return;
    }
    let tokens = tokenize(line, &mut out.opaque);
    let mut current: Vec<(String, bool)> = Vec::new();
    for token in tokens.into_iter().chain([Token::Op]) {
        match token {
            Token::Word { text, expanded } => {
                // `{` and `}` are grouping only as whole words.
                if text == "{" || text == "}" {
                    finish(&mut current, depth, out);
                } else {
                    current.push((text, expanded));
                }
            }
            Token::OpenParen => {
                if current.is_empty() {
                    // A subshell: its commands are commands like any other.
                } else {
                    out.opaque = true; // `name() …`: a function definition
                    finish(&mut current, depth, out);
                }
            }
            Token::Op => finish(&mut current, depth, out),
        }
    }
}

fn tokenize(line: &str, opaque: &mut bool) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut expanded = false;
    let mut chars = line.chars().peekable();
    let end_word =
        |tokens: &mut Vec<Token>, word: &mut String, in_word: &mut bool, expanded: &mut bool| {
            if *in_word {
                tokens.push(Token::Word {
                    text: std::mem::take(word),
                    expanded: *expanded,
                });
            }
            *in_word = false;
            *expanded = false;
        };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' => end_word(&mut tokens, &mut word, &mut in_word, &mut expanded),
            '\n' | ';' => {
                end_word(&mut tokens, &mut word, &mut in_word, &mut expanded);
                if c == ';' && chars.peek() == Some(&';') {
                    *opaque = true; // `;;`: case arms
                }
                tokens.push(Token::Op);
            }
            '&' if word.ends_with(['>', '<']) => word.push(c), // `2>&1`
            '&' | '|' => {
                end_word(&mut tokens, &mut word, &mut in_word, &mut expanded);
                if matches!(chars.peek(), Some('&' | '|')) {
                    chars.next();
                }
                tokens.push(Token::Op);
            }
            '(' => {
                let after_word = in_word || matches!(tokens.last(), Some(Token::Word { .. }));
                end_word(&mut tokens, &mut word, &mut in_word, &mut expanded);
                if after_word {
                    tokens.push(Token::OpenParen);
                } else {
                    tokens.push(Token::Op);
                }
            }
            ')' => {
                end_word(&mut tokens, &mut word, &mut in_word, &mut expanded);
                tokens.push(Token::Op);
            }
            '<' | '>' => {
                if chars.peek() == Some(&'(') || (c == '<' && chars.peek() == Some(&'<')) {
                    *opaque = true; // process substitution, here-document, here-string
                }
                in_word = true;
                word.push(c);
            }
            '`' => {
                *opaque = true;
                in_word = true;
            }
            '$' => {
                if matches!(chars.peek(), Some('(' | '\'')) {
                    *opaque = true; // `$(…)`, `$((…))`, `$'…'`
                }
                in_word = true;
                expanded = true;
                word.push(c);
            }
            '\'' => {
                in_word = true;
                let mut closed = false;
                for q in chars.by_ref() {
                    if q == '\'' {
                        closed = true;
                        break;
                    }
                    word.push(q);
                }
                *opaque |= !closed;
            }
            '"' => {
                in_word = true;
                let mut closed = false;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next() {
                            Some('\n') => *opaque = true,
                            Some(e @ ('"' | '\\' | '$' | '`')) => word.push(e),
                            Some(e) => {
                                word.push('\\');
                                word.push(e);
                            }
                            None => {}
                        },
                        '`' => *opaque = true,
                        '$' => {
                            if chars.peek() == Some(&'(') {
                                *opaque = true;
                            }
                            expanded = true;
                            word.push(q);
                        }
                        _ => word.push(q),
                    }
                }
                *opaque |= !closed;
            }
            '\\' => match chars.next() {
                Some('\n') | None => *opaque = true,
                Some(e) => {
                    in_word = true;
                    word.push(e);
                }
            },
            '#' if !in_word => {
                for q in chars.by_ref() {
                    if q == '\n' {
                        break;
                    }
                }
                tokens.push(Token::Op);
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut tokens, &mut word, &mut in_word, &mut expanded);
    tokens
}

/// Keywords that only introduce or close a body: dropped, the command after them is checked.
const PREFIX_KEYWORDS: [&str; 10] = [
    "if", "then", "else", "elif", "while", "until", "do", "!", "fi", "done",
];

/// Normalizes one simple command and records it (or the commands inside it).
fn finish(words: &mut Vec<(String, bool)>, depth: usize, out: &mut ShellLine) {
    let taken = std::mem::take(words);
    let mut words: &[(String, bool)] = &taken;
    loop {
        while let Some(((first, _), rest)) = words.split_first() {
            if is_assignment(first) || PREFIX_KEYWORDS.contains(&first.as_str()) {
                words = rest;
            } else {
                break;
            }
        }
        let Some(((first, expanded), rest)) = words.split_first() else {
            return;
        };
        if *expanded {
            out.opaque = true; // the command itself comes from an expansion
        }
        let name = first.rsplit('/').next().unwrap_or(first);
        match name {
            "env" => words = skip_options(rest, &["-u", "--unset", "-C", "--chdir"]),
            "command" | "builtin" | "exec" | "nohup" | "time" => words = skip_options(rest, &[]),
            "nice" => words = skip_options(rest, &["-n", "--adjustment"]),
            "timeout" => {
                let after = skip_options(rest, &["-s", "--signal", "-k", "--kill-after"]);
                words = after.get(1..).unwrap_or(&[]);
            }
            "sudo" | "doas" => {
                words = skip_options(
                    rest,
                    &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"],
                )
            }
            "xargs" => {
                out.opaque = true; // its arguments come from stdin
                words = skip_options(rest, &["-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a"]);
            }
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" => {
                match rest.iter().position(|(w, _)| {
                    w.starts_with('-') && !w.starts_with("--") && w.contains('c')
                }) {
                    Some(flag) => {
                        out.opaque = true;
                        if let Some((script, _)) = rest.get(flag + 1) {
                            split_into(script, depth + 1, out);
                        }
                        return;
                    }
                    None => {
                        out.commands.push(join(words, name));
                        return;
                    }
                }
            }
            "eval" => {
                out.opaque = true;
                let script: Vec<&str> = rest.iter().map(|(w, _)| w.as_str()).collect();
                split_into(&script.join(" "), depth + 1, out);
                return;
            }
            "for" | "select" => return, // `for x in …`: the body is its own command
            "case" | "function" | "coproc" => {
                out.opaque = true;
                return;
            }
            "git" => {
                let after = skip_options(
                    rest,
                    &[
                        "-C",
                        "-c",
                        "--git-dir",
                        "--work-tree",
                        "--namespace",
                        "--exec-path",
                    ],
                );
                let mut normalized = vec!["git".to_string()];
                normalized.extend(after.iter().map(|(w, _)| w.clone()));
                out.commands.push(normalized.join(" "));
                return;
            }
            _ => {
                out.commands.push(join(words, name));
                return;
            }
        }
    }
}

/// The words after leading options; options named in `with_value` take the next word too.
fn skip_options<'a>(words: &'a [(String, bool)], with_value: &[&str]) -> &'a [(String, bool)] {
    let mut rest = words;
    while let Some(((word, _), after)) = rest.split_first() {
        if word == "--" {
            return after;
        }
        if !word.starts_with('-') || word == "-" {
            // env's NAME=value arguments are assignments too.
            if is_assignment(word) {
                rest = after;
                continue;
            }
            break;
        }
        rest = if with_value.contains(&word.as_str()) {
            after.get(1..).unwrap_or(&[])
        } else {
            after
        };
    }
    rest
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

fn join(words: &[(String, bool)], name: &str) -> String {
    let mut parts = vec![name.to_string()];
    parts.extend(words.iter().skip(1).map(|(w, _)| w.clone()));
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(line: &str) -> (Vec<String>, bool) {
        let split = split(line);
        (split.commands, split.opaque)
    }

    #[test]
    fn compound_lines_split_into_simple_commands() {
        assert_eq!(
            seen("ls; echo x > ../PWNED"),
            (vec!["ls".into(), "echo x > ../PWNED".into()], false)
        );
        assert_eq!(seen("ls && rm -rf x").0, ["ls", "rm -rf x"]);
        assert_eq!(seen("a | b || c & d").0, ["a", "b", "c", "d"]);
        assert_eq!(seen("{ git push; }").0, ["git push"]);
        assert_eq!(seen("(cd x && git push)").0, ["cd x", "git push"]);
        assert_eq!(seen("if true; then git push; fi").0, ["true", "git push"]);
        assert_eq!(seen("while x; do git push; done").0, ["x", "git push"]);
        assert_eq!(seen("echo 'a; b' \"c && d\"").0, ["echo a; b c && d"]);
        assert_eq!(seen("ls 2>&1 # comment; rm").0, ["ls 2>&1"]);
    }

    #[test]
    fn wrappers_and_spellings_are_normalized() {
        for line in [
            "git push",
            "FOO=1 git push",
            "env FOO=1 git push",
            "command git push",
            "builtin git push",
            "exec git push",
            "time git push",
            "nice -n 5 git push",
            "nohup git push",
            "timeout 5 git push",
            "sudo -u root git push",
            "/usr/bin/git push",
            "git -C . push",
            "git -c a=b --no-pager push",
            "git\tpush",
            "git  push",
            "\\git push",
            "pu''sh",
        ] {
            let (commands, _) = seen(line);
            let expected = if line == "pu''sh" { "push" } else { "git push" };
            assert_eq!(commands, [expected], "{line}");
        }
    }

    #[test]
    fn what_cannot_be_seen_through_is_opaque() {
        for line in [
            "echo $(git push)",
            "$(echo git) push",
            "`echo git` push",
            "eval git push",
            "sh -c 'git push'",
            "bash -lc \"git push\"",
            "echo x | xargs git",
            "cat <<EOF\nx\nEOF",
            "diff <(ls) <(ls)",
            "ls \\\nrm",
            "$CMD push",
            "case x in a) git push;; esac",
            "f() { git push; }",
            "echo 'unterminated",
        ] {
            assert!(seen(line).1, "{line}");
        }
        // Unwrapped anyway, for deny and ask rules.
        assert!(seen("sh -c 'git push'").0.contains(&"git push".to_string()));
        assert!(seen("eval git push").0.contains(&"git push".to_string()));
        assert!(
            seen("echo x | xargs git push")
                .0
                .contains(&"git push".to_string())
        );
        for line in ["ls -la", "echo \"$HOME\"", "git log --oneline | head"] {
            assert!(!seen(line).1, "{line}");
        }
    }
}
