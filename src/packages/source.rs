//! What a package source string names, as pi 1.6.0 reads it: `npm:<name>[@<version>]`, a git
//! source (`git:<host>/<path>[@<ref>]`, `git:git@<host>:<path>[@<ref>]`, or an `https://`,
//! `http://`, `ssh://`, `git://` URL, each with an optional `@<ref>` after the path), or else a
//! local path. Also each source's identity (npm name, git host/path without the ref, resolved
//! path), which decides whether two entries are the same package.
//!
//! Pure: no IO. Differences from pi: hosted-git-info's special forms (`github:user/repo` after
//! `git:`, `#committish`) are read as generic URLs, which gives the same host/path for the
//! `git:host/user/repo` and URL forms people write.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Npm(NpmSource),
    Git(GitSource),
    /// A path as written (relative ones resolve against the settings file's directory).
    Local(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct NpmSource {
    /// What follows `npm:` (`name@version`), handed to `npm install`.
    pub spec: String,
    pub name: String,
    pub version: Option<String>,
    /// An exact version (`1.2.3`): never updated.
    pub pinned: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GitSource {
    /// What `git clone` gets.
    pub repo: String,
    pub host: String,
    /// `owner/repo`, without `.git`.
    pub path: String,
    pub git_ref: Option<String>,
}

/// pi's `isLocalPath`: anything without a known non-local prefix.
fn is_local_path(value: &str) -> bool {
    let trimmed = value.trim();
    ![
        "npm:", "git:", "github:", "http:", "https:", "ssh:", "builtin:",
    ]
    .iter()
    .any(|prefix| trimmed.starts_with(prefix))
}

pub fn parse(source: &str) -> Source {
    if let Some(spec) = source.strip_prefix("npm:") {
        let spec = spec.trim().to_string();
        let (name, version) = split_npm_spec(&spec);
        let pinned = version.as_deref().is_some_and(is_exact_version);
        return Source::Npm(NpmSource {
            spec,
            name,
            version,
            pinned,
        });
    }
    if is_local_path(source) {
        return Source::Local(source.to_string());
    }
    match parse_git_url(source) {
        Some(git) => Source::Git(git),
        None => Source::Local(source.to_string()),
    }
}

/// `@scope/name@range` → (`@scope/name`, `range`); a spec that does not split is all name.
fn split_npm_spec(spec: &str) -> (String, Option<String>) {
    let search_from = usize::from(spec.starts_with('@'));
    match spec[search_from..].find('@') {
        Some(at) => {
            let at = at + search_from;
            let (name, version) = (&spec[..at], &spec[at + 1..]);
            let slashes = name.matches('/').count();
            if name.len() > search_from && !version.is_empty() && slashes <= 1 {
                (name.to_string(), Some(version.to_string()))
            } else {
                (spec.to_string(), None)
            }
        }
        None => (spec.to_string(), None),
    }
}

/// semver's `valid`: `1.2.3`, with an optional `v`/`=`, pre-release and build.
pub fn is_exact_version(version: &str) -> bool {
    let v = version.trim();
    let v = v
        .strip_prefix('v')
        .or_else(|| v.strip_prefix('='))
        .unwrap_or(v);
    let (core, _build) = v.split_once('+').unwrap_or((v, ""));
    let (core, pre) = match core.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (core, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    numbers.len() == 3
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        })
}

/// pi's `parseGitUrl`: with `git:` every shorthand, without it only protocol URLs.
pub fn parse_git_url(source: &str) -> Option<GitSource> {
    let trimmed = source.trim();
    let (has_prefix, url) = match trimmed.strip_prefix("git:") {
        Some(rest) => (true, rest.trim()),
        None => (false, trimmed),
    };
    let lower = url.to_ascii_lowercase();
    let is_protocol_url = ["https://", "http://", "ssh://", "git://"]
        .iter()
        .any(|p| lower.starts_with(p));
    if !has_prefix && !is_protocol_url {
        return None;
    }
    // `git@host:path[@ref]` (scp-like).
    if let Some(rest) = url.strip_prefix("git@")
        && let Some((host, path_ref)) = rest.split_once(':')
        && !host.contains('/')
    {
        let (path, git_ref) = split_ref(path_ref);
        return build(format!("git@{host}:{path}"), host, path, git_ref);
    }
    if let Some(scheme_end) = url.find("://") {
        let scheme = &url[..scheme_end];
        if !["https", "http", "ssh", "git"].contains(&scheme.to_ascii_lowercase().as_str()) {
            return None;
        }
        let rest = &url[scheme_end + 3..];
        let (authority, path_ref) = rest.split_once('/').unwrap_or((rest, ""));
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = host_port.split(':').next().unwrap_or_default();
        let (path, git_ref) = split_ref(path_ref);
        let repo = format!("{scheme}://{authority}/{path}");
        return build(repo.trim_end_matches('/').to_string(), host, path, git_ref);
    }
    let (host, path_ref) = url.split_once('/')?;
    if !host.contains('.') && host != "localhost" {
        return None;
    }
    let (path, git_ref) = split_ref(path_ref);
    build(format!("https://{host}/{path}"), host, path, git_ref)
}

/// `path@ref` → (`path`, `ref`); an empty side keeps the whole as path.
fn split_ref(path_ref: &str) -> (&str, Option<String>) {
    match path_ref.split_once('@') {
        Some((path, git_ref)) if !path.is_empty() && !git_ref.is_empty() => {
            (path, Some(git_ref.to_string()))
        }
        _ => (path_ref, None),
    }
}

fn build(repo: String, host: &str, path: &str, git_ref: Option<String>) -> Option<GitSource> {
    if path.starts_with('/') {
        return None;
    }
    let normalized = path.strip_suffix(".git").unwrap_or(path);
    let normalized = normalized.trim_start_matches('/');
    if host.is_empty() || normalized.is_empty() || normalized.split('/').count() < 2 {
        return None;
    }
    if unsafe_part(host, false) || unsafe_part(normalized, true) {
        return None;
    }
    Some(GitSource {
        repo,
        host: host.to_string(),
        path: normalized.to_string(),
        git_ref,
    })
}

/// A host or path that could step out of the install folder (as written or percent-decoded).
fn unsafe_part(value: &str, allow_slash: bool) -> bool {
    let Some(decoded) = percent_decode(value) else {
        return true;
    };
    [value, decoded.as_str()].iter().any(|candidate| {
        candidate.contains('\0')
            || candidate.contains('\\')
            || candidate.starts_with('/')
            || (!allow_slash && candidate.contains('/'))
            || candidate.split('/').any(|segment| segment == "..")
    })
}

fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// pi's `resolvePath`: trims, expands `~`, resolves against `base` (lexically).
pub fn resolve_local(path: &str, base: &Path, home: &Path) -> PathBuf {
    let trimmed = path.trim();
    let expanded = if trimmed == "~" {
        home.to_path_buf()
    } else if let Some(rest) = trimmed.strip_prefix("~/") {
        home.join(rest)
    } else {
        base.join(trimmed)
    };
    crate::paths::normalize_lexically(&expanded)
}

/// The identity two entries share when they are the same package (`base` resolves local paths).
pub fn identity(source: &str, base: &Path, home: &Path) -> String {
    match parse(source) {
        Source::Npm(npm) => format!("npm:{}", npm.name),
        Source::Git(git) => format!("git:{}/{}", git.host, git.path),
        Source::Local(path) => format!("local:{}", resolve_local(&path, base, home).display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(source: &str) -> GitSource {
        match parse(source) {
            Source::Git(git) => git,
            other => panic!("{source}: {other:?}"),
        }
    }

    #[test]
    fn npm_specs() {
        let Source::Npm(npm) = parse("npm:@scope/tools@1.2.3") else {
            panic!()
        };
        assert_eq!(
            (npm.name.as_str(), npm.version.as_deref(), npm.pinned),
            ("@scope/tools", Some("1.2.3"), true)
        );
        let Source::Npm(npm) = parse("npm:tools@^1.0.0") else {
            panic!()
        };
        assert_eq!((npm.name.as_str(), npm.pinned), ("tools", false));
        let Source::Npm(npm) = parse("npm:tools") else {
            panic!()
        };
        assert_eq!((npm.name.as_str(), npm.version), ("tools", None));
        assert!(is_exact_version("1.0.0-beta.1+b"));
        assert!(!is_exact_version("1.0"));
        assert!(!is_exact_version("latest"));
    }

    #[test]
    fn git_forms_share_host_and_path() {
        let short = git("git:github.com/user/repo@v1");
        assert_eq!(short.repo, "https://github.com/user/repo");
        assert_eq!(
            (short.host.as_str(), short.path.as_str()),
            ("github.com", "user/repo")
        );
        assert_eq!(short.git_ref.as_deref(), Some("v1"));
        let url = git("https://github.com/user/repo.git");
        assert_eq!(url.repo, "https://github.com/user/repo.git");
        assert_eq!(url.path, "user/repo");
        let ssh = git("git:git@github.com:user/repo@main");
        assert_eq!(ssh.repo, "git@github.com:user/repo");
        assert_eq!(ssh.git_ref.as_deref(), Some("main"));
        assert_eq!(git("ssh://git@example.org:22/a/b").host, "example.org");
        // No prefix and no protocol: a local path; shorthand without a dotted host: local.
        assert!(matches!(parse("github.com/user/repo"), Source::Local(_)));
        assert!(matches!(parse("git:nohost/a/b"), Source::Local(_)));
        // Escapes out of the install folder are refused.
        assert!(matches!(
            parse("git:example.com/a/../../b"),
            Source::Local(_)
        ));
        assert!(matches!(
            parse("git:example.com/a/%2e%2e/b"),
            Source::Local(_)
        ));
        assert!(matches!(parse("git:example.com/single"), Source::Local(_)));
    }

    #[test]
    fn identities() {
        let base = Path::new("/agent");
        let home = Path::new("/home/u");
        assert_eq!(
            identity("npm:a@1.0.0", base, home),
            identity("npm:a", base, home)
        );
        assert_eq!(
            identity("git:github.com/u/r@v1", base, home),
            identity("https://github.com/u/r", base, home)
        );
        assert_eq!(identity("../pkg", base, home), "local:/pkg");
        assert_eq!(identity("~/pkg", base, home), "local:/home/u/pkg");
    }
}
