//! (v2) Providers whose models the extension refreshes (pi 1.6.0's `registerProvider` with
//! `refreshModels`): a `register_provider` config with `refreshModels: true` makes pi-rs ask the
//! registering extension `refresh_models` right after the registration (pi refreshes the catalog
//! then and at start-up); the answer's `models` replace the registration's models, as pi
//! replaces that registration's live models with the returned list.

use serde_json::{Value, json};

use super::Agent;
use crate::extensions::{ExtensionId, HookId};
use crate::rpc::events::Event;

/// A `refresh_models` request waiting for its answer.
pub struct PendingRefresh {
    pub id: HookId,
    extension: ExtensionId,
    provider: String,
    /// The provider's registered config (without `refreshModels`).
    config: Value,
}

impl Agent {
    /// Asks `extension` for the models of its provider `name` (registered with `config`).
    pub(super) fn refresh_provider_models(
        &mut self,
        extension: ExtensionId,
        name: &str,
        config: Value,
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
        });
    }

    /// The providers of the `register` lines with `refreshModels: true` (at start and after a
    /// reload; `only` one extension's, when it registers late): each is asked once.
    pub(super) fn refresh_registered_providers(&mut self, only: Option<ExtensionId>) {
        let Some(host) = self.extensions.host.as_ref() else {
            return;
        };
        for (extension, name, config) in
            crate::extensions::launch::refreshed_providers(host, &self.config)
        {
            if only.is_none_or(|only| only == extension) {
                self.refresh_provider_models(extension, &name, config);
            }
        }
    }

    /// The answer to a `refresh_models` request: its `models` replace the provider's. A failed
    /// or malformed answer is an `extension_error` (`event: "refresh_models"`) and changes
    /// nothing; so is an answer for a provider unregistered meanwhile.
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
        let outcome = result.and_then(|answer| {
            let models = answer
                .get("models")
                .filter(|m| m.is_array())
                .cloned()
                .ok_or("the answer's models must be an array of model definitions")?;
            if !self.config.is_extension_provider(&pending.provider) {
                return Err(format!("{} is no longer registered", pending.provider));
            }
            let mut config = pending.config.clone();
            if let Some(object) = config.as_object_mut() {
                object.insert("models".into(), models);
            }
            self.config.register_provider(&pending.provider, &config)
        });
        match outcome {
            Ok(()) => self.refresh_current_model(),
            Err(error) => {
                let extension_path = self.extension_path(pending.extension);
                self.emit(Event::ExtensionError {
                    extension_path,
                    event: "refresh_models".into(),
                    error,
                });
            }
        }
    }
}
