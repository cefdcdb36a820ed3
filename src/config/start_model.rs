//! The model and thinking level a run starts with (FACTS §1.8), and the scoped models
//! (`--models`, else settings `enabledModels`) that `cycle_model` moves through.
//!
//! Model: `--model` (resolved among all models), else a scoped model (unless resuming; the saved
//! default wins if it is in scope), else the resumed session's model if it still exists and has
//! credentials, else settings/defaults via the registry, else the placeholder. Thinking:
//! `--thinking` > `:level` suffix > the session's level > settings default > medium, clamped to
//! the model. `--api-key` becomes the chosen provider's runtime key.
//!
//! Input: the command line's model flags, the config, what the session says. Output: a
//! `StartModel` with the warnings to print, or a `ModelError`; the scope and its warnings.

use super::{Config, Diagnostic, Model, ModelError, ScopedModel, ThinkingLevel};

/// The model flags of the command line (`cli::Args::model_flags`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelFlags<'a> {
    pub provider: Option<&'a str>,
    pub model: Option<&'a str>,
    /// `--models`: comma-separated patterns.
    pub models: Option<&'a str>,
    pub thinking: Option<&'a str>,
    pub api_key: Option<&'a str>,
}

/// What the session being continued says (all `None` for a new one).
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionModel<'a> {
    /// It existed before: its model is kept over scoped models.
    pub resuming: bool,
    /// (provider, id) of its last model.
    pub model: Option<(&'a str, &'a str)>,
    pub thinking: Option<ThinkingLevel>,
}

#[derive(Debug)]
pub struct StartModel {
    pub model: Model,
    pub thinking: ThinkingLevel,
    /// One sentence each, for stderr.
    pub warnings: Vec<String>,
}

/// The starting model and level; `scoped` is what [`scoped_models`] found.
pub fn choose(
    flags: &ModelFlags,
    config: &mut Config,
    session: &SessionModel,
    scoped: &[ScopedModel],
) -> Result<StartModel, ModelError> {
    let mut warnings = Vec::new();
    let mut suffix_level = None;
    let model = match flags.model {
        Some(pattern) => {
            let resolved = config.resolve_cli_model(
                flags.provider,
                pattern,
                flags.api_key.is_some(),
                flags.thinking,
            )?;
            warnings.extend(resolved.warning);
            suffix_level = resolved.thinking;
            Some(resolved.model)
        }
        None => None,
    };
    if let Some(key) = flags.api_key {
        let Some(model) = &model else {
            return Err(ModelError::ApiKeyWithoutModel);
        };
        config.set_runtime_api_key(&model.provider, key.to_string());
    }
    // A resumed session keeps its model if it still exists and has credentials.
    let session_model = session.model.and_then(|(provider, id)| {
        config
            .find_model(provider, id)
            .filter(|m| config.has_auth(&m.provider))
    });
    // Scoped models (--models / enabledModels) come before the saved default, unless resuming;
    // the saved default wins if it is in scope.
    let scoped_choice = (!session.resuming && model.is_none())
        .then(|| {
            let saved = scoped.iter().find(|s| {
                Some(s.model.provider.as_str()) == config.default_provider()
                    && Some(s.model.id.as_str()) == config.default_model()
            });
            saved.or(scoped.first()).cloned()
        })
        .flatten();
    if let Some(choice) = &scoped_choice {
        suffix_level = suffix_level.or(choice.thinking);
    }
    let model = model
        .or(scoped_choice.map(|s| s.model))
        .or(session_model)
        .or_else(|| config.initial_model())
        .unwrap_or_else(Model::placeholder);
    let flag_level = flags.thinking.and_then(|text| {
        let level = ThinkingLevel::parse(text);
        if level.is_none() {
            warnings.push(format!(
                "Invalid thinking level \"{text}\". Valid values: off, minimal, low, medium, high, xhigh, max"
            ));
        }
        level
    });
    let wanted = flag_level
        .or(suffix_level)
        .or(session.thinking)
        .or_else(|| config.default_thinking_level())
        .unwrap_or(ThinkingLevel::Medium);
    let thinking = model.clamp_thinking_level(wanted);
    Ok(StartModel {
        model,
        thinking,
        warnings,
    })
}

/// `--models` patterns, else settings `enabledModels`, resolved against the models with auth;
/// and the problems found, one sentence each.
pub fn scoped_models(flags: &ModelFlags, config: &Config) -> (Vec<ScopedModel>, Vec<String>) {
    let patterns: Vec<String> = match flags.models {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect(),
        None => config.enabled_models().unwrap_or_default(),
    };
    if patterns.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let (scoped, diagnostics) = config.resolve_model_scope(&patterns);
    let warnings = diagnostics
        .into_iter()
        .map(|Diagnostic::Warning(text)| text)
        .collect();
    (scoped, warnings)
}
