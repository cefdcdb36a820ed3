//! Servers extensions register (pi 1.6.0's `pi.registerMcpServer()`, protocol v2's
//! `register_mcp_server`): the registry of one run's extensions, as pi's `McpServerRegistry` with
//! the checks of pi's `registerMcpServer` (pi's messages). Pure: the agent keeps the registry and
//! hands its list to `McpHost::set_registered`, which connects the servers.
//!
//! A registration lives as long as the extension that made it: `unregister_mcp_server`, the
//! extension's exit and a reload remove it (nothing is saved, as in pi).

use serde_json::{Value, json};

/// One registration (pi's `RegisteredMcpServer`): `config` is the `mcpServers` entry as checked,
/// with exposure aliases resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    pub name: String,
    pub config: Value,
    /// The path of the extension that registered it.
    pub extension_path: String,
}

impl Registration {
    /// pi's `RegisteredMcpServer` shape: `{name, config, extensionPath}`.
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "config": self.config, "extensionPath": self.extension_path})
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    servers: Vec<Registration>,
}

impl Registry {
    /// Registers or replaces `extension_path`'s server `name`. Errors (pi's texts): an invalid
    /// name or config, a name another extension registered, a name that conflicts with another
    /// registered server. Stricter than pi: `!command` values are refused, since the command
    /// would run in pi-rs, outside the extension's sandbox.
    pub fn register(
        &mut self,
        name: &str,
        config: &Value,
        extension_path: &str,
    ) -> Result<(), String> {
        let invalid = |e: String| {
            format!("Invalid MCP server registered by extension \"{extension_path}\": {e}")
        };
        super::config::validate(name, config).map_err(invalid)?;
        if has_command_value(config) {
            return Err(invalid(format!(
                "server \"{name}\": `!command` values are not accepted from extensions; pass the value itself or `${{VARIABLE}}`"
            )));
        }
        if let Some(other) = self
            .servers
            .iter()
            .find(|s| s.name == name && s.extension_path != extension_path)
        {
            return Err(format!(
                "MCP server \"{name}\" is already registered by extension \"{}\"",
                other.extension_path
            ));
        }
        let namespace = super::naming::namespace(name);
        if let Some(clash) = self
            .servers
            .iter()
            .find(|s| s.name != name && super::naming::namespace(&s.name) == namespace)
        {
            return Err(format!(
                "MCP server \"{name}\" conflicts with registered server \"{}\"",
                clash.name
            ));
        }
        let registration = Registration {
            name: name.to_string(),
            config: resolve_aliases(config.clone()),
            extension_path: extension_path.to_string(),
        };
        match self.servers.iter().position(|s| s.name == name) {
            Some(at) => self.servers[at] = registration,
            None => self.servers.push(registration),
        }
        Ok(())
    }

    /// Removes `extension_path`'s server `name`; servers of other extensions stay. True when
    /// something was removed.
    pub fn unregister(&mut self, name: &str, extension_path: &str) -> bool {
        let before = self.servers.len();
        self.servers
            .retain(|s| s.name != name || s.extension_path != extension_path);
        self.servers.len() != before
    }

    /// Removes every server `extension_path` registered (it exited). True when any was.
    pub fn remove_extension(&mut self, extension_path: &str) -> bool {
        let before = self.servers.len();
        self.servers.retain(|s| s.extension_path != extension_path);
        self.servers.len() != before
    }

    /// Removes every registration (a reload: the new extensions register again).
    pub fn clear(&mut self) -> bool {
        let had = !self.servers.is_empty();
        self.servers.clear();
        had
    }

    /// The registrations, in registration order.
    pub fn list(&self) -> &[Registration] {
        &self.servers
    }

    /// pi's `getMcpServers()` and the `servers` of `mcp_servers_change`.
    pub fn to_json(&self) -> Value {
        Value::Array(self.servers.iter().map(Registration::to_json).collect())
    }
}

/// A whole-value `!command` in `env`, `headers` or `oauth.clientSecret`.
fn has_command_value(config: &Value) -> bool {
    let maps = ["env", "headers"]
        .iter()
        .filter_map(|k| config.get(*k).and_then(Value::as_object))
        .flat_map(|m| m.values());
    let secret = config.get("oauth").and_then(|o| o.get("clientSecret"));
    maps.chain(secret)
        .filter_map(Value::as_str)
        .any(|v| v.starts_with('!'))
}

/// pi's `resolveExposureAliases`: `codemode-deferred` is `codemode`.
fn resolve_aliases(mut config: Value) -> Value {
    let alias = |v: &mut Value| {
        if v == "codemode-deferred" {
            *v = json!("codemode");
        }
    };
    if let Some(exposure) = config.get_mut("exposure") {
        alias(exposure);
    }
    if let Some(Value::Object(tools)) = config.get_mut("toolExposure") {
        tools.values_mut().for_each(alias);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio_resolved() -> Value {
        json!({"command": "srv", "exposure": "codemode"})
    }

    #[test]
    fn pi_rules_for_names_owners_and_conflicts() {
        let mut registry = Registry::default();
        let stdio = json!({"command": "srv", "exposure": "codemode-deferred"});
        registry.register("docs", &stdio, "/a.py").unwrap();
        assert_eq!(registry.list()[0].config["exposure"], "codemode");
        // The same extension replaces its registration.
        registry
            .register("docs", &json!({"url": "https://x.test/mcp"}), "/a.py")
            .unwrap();
        assert_eq!(registry.list().len(), 1);
        let taken = registry.register("docs", &stdio, "/b.py").unwrap_err();
        assert_eq!(
            taken,
            "MCP server \"docs\" is already registered by extension \"/a.py\""
        );
        registry.register("my-docs", &stdio, "/a.py").unwrap();
        let clash = registry.register("my_docs", &stdio, "/b.py").unwrap_err();
        assert_eq!(
            clash,
            "MCP server \"my_docs\" conflicts with registered server \"my-docs\""
        );
        let bad = registry.register("bad name", &stdio, "/b.py").unwrap_err();
        assert!(
            bad.starts_with(
                "Invalid MCP server registered by extension \"/b.py\": invalid server name"
            ),
            "{bad}"
        );
        let command = json!({"command": "srv", "env": {"T": "!cat secret"}});
        assert!(registry.register("x", &command, "/b.py").is_err());
        // Only the owner unregisters.
        assert!(!registry.unregister("docs", "/b.py"));
        assert!(registry.unregister("docs", "/a.py"));
        registry.register("y", &stdio, "/b.py").unwrap();
        assert!(registry.remove_extension("/b.py"));
        assert_eq!(
            registry.to_json(),
            json!([{"name": "my-docs", "config": stdio_resolved(), "extensionPath": "/a.py"}])
        );
    }
}
