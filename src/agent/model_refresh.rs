//! (v2) Providers whose models the extension refreshes (pi 1.6.0's `registerProvider` with
//! `refreshModels`): a `register_provider` config with `refreshModels: true` makes pi-rs ask the
//! registering extension `refresh_models` right after the registration (pi refreshes the catalog
//! then and at start-up); the answer's `models` replace the registration's models, as pi
//! replaces that registration's live models with the returned list.
//!
//! `oauth.modifyModels: true` (pi's `oauth.modifyModels(models, credential)`): after that same
//! refresh (right after the registration when there is no `refreshModels`), when auth.json holds
//! an OAuth login of the provider, pi-rs asks `oauth_modify_models` with the provider's models
//! and the login; the answer's models replace them, as pi applies the hook to the models of the
//! refreshed provider.

use serde_json::{Value, json};

use super::Agent;
use crate::extensions::{ExtensionId, HookId};
use crate::rpc::events::Event;

/// A `refresh_models` or `oauth_modify_models` request waiting for its answer.
pub struct PendingRefresh {
    pub id: HookId,
    extension: ExtensionId,
    provider: String,
    /// The provider's registered config (without `refreshModels` and `oauth`).
    config: Value,
    kind: RefreshKind,
}

#[derive(Clone, Copy, PartialEq)]
enum RefreshKind {
    /// `refresh_models`; then `oauth_modify_models` when the registration asks for it.
    Models { then_modify: bool },
    /// `oauth_modify_models`.
    ModifyModels,
}

impl RefreshKind {
    fn event(self) -> &'static str {
        match self {
            RefreshKind::Models { .. } => "refresh_models",
            RefreshKind::ModifyModels => "oauth_modify_models",
        }
    }
}

impl Agent {
    /// Asks `extension` for the models of its provider `name` (registered with `config`);
    /// `then_modify`: `oauth_modify_models` follows a successful answer.
    pub(super) fn refresh_provider_models(
        &mut self,
        extension: ExtensionId,
        name: &str,
        config: Value,
        then_modify: bool,
    ) {
        let Some(host) = self.extensions.host.as_ref() else {
            return;
        };
        let request = json!({
            "provider": name,
            "allowNetwork": !crate::packages::offline_from_env(),
        });
        let id = host.ask(
            "refresh_models",
            extension,
            request,
            self.extensions.hook_deadline,
        );
        self.extensions.model_refreshes.push(PendingRefresh {
            id,
            extension,
            provider: name.to_string(),
            config,
            kind: RefreshKind::Models { then_modify },
        });
    }

    /// Asks `extension` to adapt the models of its provider `name` (registered with `config`:
    /// its models, not those an earlier answer adapted) to the stored OAuth login, as it is;
    /// nothing without one. An earlier request for the same provider still waiting is dropped
    /// (its answer would be stale). The provider is remembered for `remodify_providers`.
    pub(super) fn modify_provider_models(
        &mut self,
        extension: ExtensionId,
        name: &str,
        config: Value,
    ) {
        let Some(host) = self.extensions.host.as_ref() else {
            return;
        };
        self.extensions
            .modified_providers
            .insert(name.to_string(), (extension, config.clone()));
        let Some(credential) = crate::config::oauth::stored_login(&self.config.agent_dir, name)
        else {
            return;
        };
        let models = match self.config.models_registered_with(name, &config) {
            Ok(models) => models,
            Err(error) => {
                log::warn!("cannot ask oauth_modify_models for {name}: {error}");
                return;
            }
        };
        let request = json!({ "provider": name, "models": models, "credential": credential });
        let deadline = crate::extensions::providers::oauth_deadline(&self.config);
        let id = host.ask("oauth_modify_models", extension, request, deadline);
        self.extensions
            .model_refreshes
            .retain(|r| !(r.kind == RefreshKind::ModifyModels && r.provider == name));
        self.extensions.model_refreshes.push(PendingRefresh {
            id,
            extension,
            provider: name.to_string(),
            config,
            kind: RefreshKind::ModifyModels,
        });
    }

    /// A provider or virtual model was registered or unregistered: as pi 1.6.0 refreshes every
    /// provider's models then (with the stored login as it is), each provider registered with
    /// `oauth.modifyModels` (but `except`, asked already) is asked again.
    pub(super) fn remodify_providers(&mut self, except: Option<&str>) {
        let mut providers: Vec<(String, (ExtensionId, Value))> = self
            .extensions
            .modified_providers
            .iter()
            .filter(|(name, _)| Some(name.as_str()) != except)
            .map(|(name, entry)| (name.clone(), entry.clone()))
            .collect();
        providers.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, (extension, config)) in providers {
            if self.config.is_extension_provider(&name) {
                self.modify_provider_models(extension, &name, config);
            }
        }
    }

    /// The providers of the `register` lines with `refreshModels: true` or `oauth.modifyModels:
    /// true` (at start and after a reload; `only` one extension's, when it registers late): each
    /// is asked once.
    pub(super) fn refresh_registered_providers(&mut self, only: Option<ExtensionId>) {
        if only.is_none() {
            // The extensions (re)started: theirs register anew.
            self.extensions.modified_providers.clear();
        }
        let Some(host) = self.extensions.host.as_ref() else {
            return;
        };
        for provider in crate::extensions::launch::refreshed_providers(host, &self.config) {
            if only.is_some_and(|only| only != provider.extension) {
                continue;
            }
            self.refresh_registered(
                provider.extension,
                &provider.name,
                provider.config,
                provider.refresh_models,
                provider.modify_models,
            );
        }
    }

    /// After a registration: `refresh_models` (then `oauth_modify_models`), or
    /// `oauth_modify_models` alone.
    pub(super) fn refresh_registered(
        &mut self,
        extension: ExtensionId,
        name: &str,
        config: Value,
        refresh_models: bool,
        modify_models: bool,
    ) {
        if refresh_models {
            self.refresh_provider_models(extension, name, config, modify_models);
        } else if modify_models {
            self.modify_provider_models(extension, name, config);
        }
    }

    /// The answer to a `refresh_models` or `oauth_modify_models` request: its `models` replace
    /// the provider's. A failed or malformed answer is an `extension_error` (`event`: the
    /// request's type) and changes nothing; so is an answer for a provider unregistered
    /// meanwhile.
    pub(super) fn on_models_refreshed(&mut self, id: HookId, result: Result<Value, String>) {
        let Some(position) = self
            .extensions
            .model_refreshes
            .iter()
            .position(|r| r.id == id)
        else {
            return;
        };
        let pending = self.extensions.model_refreshes.remove(position);
        let mut config = pending.config.clone();
        let outcome = result.and_then(|answer| {
            let models = answer
                .get("models")
                .filter(|m| m.is_array())
                .cloned()
                .ok_or("the answer's models must be an array of model definitions")?;
            let models = match pending.kind {
                RefreshKind::Models { .. } => models,
                RefreshKind::ModifyModels => as_definitions(&pending.provider, models)?,
            };
            if !self.config.is_extension_provider(&pending.provider) {
                return Err(format!("{} is no longer registered", pending.provider));
            }
            if let Some(object) = config.as_object_mut() {
                object.insert("models".into(), models);
            }
            self.config.register_provider(&pending.provider, &config)
        });
        match outcome {
            Ok(()) => {
                self.refresh_current_model();
                if pending.kind == (RefreshKind::Models { then_modify: true }) {
                    // The refreshed models are the ones the login adapts (the registration
                    // without them stays the base: `config` has the unmodified list).
                    self.modify_provider_models(pending.extension, &pending.provider, config);
                }
            }
            Err(error) => {
                let extension_path = self.extension_path(pending.extension);
                self.emit(Event::ExtensionError {
                    extension_path,
                    event: pending.kind.event().into(),
                    error,
                });
            }
        }
    }
}

/// The models of an `oauth_modify_models` answer (models as the registry shows them) as
/// `register_provider` model definitions: each an object whose `provider`, when given, is the
/// provider's, without it.
fn as_definitions(provider: &str, models: Value) -> Result<Value, String> {
    let Value::Array(models) = models else {
        return Err("the answer's models must be an array of models".into());
    };
    models
        .into_iter()
        .map(|model| {
            let Value::Object(mut model) = model else {
                return Err("each of the answer's models must be an object".into());
            };
            match model.remove("provider") {
                None => {}
                Some(Value::String(named)) if named == provider => {}
                Some(other) => {
                    return Err(format!(
                        "a model of {provider} cannot name the provider {other}"
                    ));
                }
            }
            Ok(Value::Object(model))
        })
        .collect::<Result<Vec<Value>, String>>()
        .map(Value::Array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_models_become_definitions_of_their_provider() {
        let models = json!([{"id": "a", "provider": "corp", "baseUrl": "x"}, {"id": "b"}]);
        assert_eq!(
            as_definitions("corp", models),
            Ok(json!([{"id": "a", "baseUrl": "x"}, {"id": "b"}]))
        );
        let foreign = as_definitions("corp", json!([{"id": "a", "provider": "other"}]));
        assert!(foreign.unwrap_err().contains("cannot name the provider"));
        let not_object = as_definitions("corp", json!(["a"]));
        assert!(not_object.unwrap_err().contains("must be an object"));
    }
}
