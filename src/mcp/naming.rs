//! Names of MCP tools as the model sees them (pi's rules; the `*` patterns that `toolExposure`
//! and `--tools` accept are `crate::glob::wildcard_match` without `?`): `mcp__<server>__<tool>` with every character other than
//! `[A-Za-z0-9_]` replaced by `_`, shortened to 64 characters with an 8-hex-digit SHA-256 suffix
//! when too long or when it collides. Pure functions.

/// Provider tool names are limited to 64 characters.
const MAX_TOOL_NAME_LENGTH: usize = 64;

/// The model-facing name of `server`'s `tool`; `is_taken` reports names another tool already has
/// (or that collide after sanitizing), which then get the hash suffix.
pub fn tool_name(server: &str, tool: &str, is_taken: &dyn Fn(&str) -> bool) -> String {
    let name = sanitize(&format!("mcp__{server}__{tool}"));
    if name.len() <= MAX_TOOL_NAME_LENGTH && !is_taken(&name) {
        return name;
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{server}\0{tool}").as_bytes(),
    );
    let hash: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // ASCII only after sanitizing, so byte slicing is safe.
    format!(
        "{}_{hash}",
        &name[..name.len().min(MAX_TOOL_NAME_LENGTH - hash.len() - 1)]
    )
}

/// `mcp__<server>__<tool>` before collision handling.
pub fn plain_tool_name(server: &str, tool: &str) -> String {
    sanitize(&format!("mcp__{server}__{tool}"))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '_' {
            true => c,
            false => '_',
        })
        .collect()
}

/// The namespace of a server's tools (pi 1.6.0's `mcpNamespace`): `mcp__<server>` with `-` as
/// `_`; server names that differ only in `-` and `_` share one namespace.
pub fn namespace(server: &str) -> String {
    format!("mcp__{}", server.replace('-', "_"))
}

/// Whether a server name is allowed: letters, digits, `_` and `-`.
pub fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_and_shortened_like_pi() {
        assert_eq!(tool_name("docs", "search", &|_| false), "mcp__docs__search");
        assert_eq!(
            tool_name("my-server", "get.item v2", &|_| false),
            "mcp__my_server__get_item_v2"
        );
        let long = tool_name("s", &"x".repeat(80), &|_| false);
        assert_eq!(long.len(), 64);
        assert_eq!(&long[..55], &format!("mcp__s__{}", "x".repeat(47)));
        let taken = tool_name("a", "b-c", &|_| true);
        assert!(taken.starts_with("mcp__a__b_c_") && taken.len() == "mcp__a__b_c_".len() + 8);
        // Same inputs, same suffix: the name does not depend on list order.
        assert_eq!(taken, tool_name("a", "b-c", &|_| true));
        assert_ne!(taken, tool_name("a", "b_c", &|_| true));
    }

    #[test]
    fn namespaces_and_server_names() {
        assert_eq!(namespace("dev-radius"), namespace("dev_radius"));
        assert!(
            is_valid_server_name("a-b_C9")
                && !is_valid_server_name("a b")
                && !is_valid_server_name("")
        );
    }
}
