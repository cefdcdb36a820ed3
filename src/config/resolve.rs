//! Model pattern resolution (`--provider`/`--model`, `--models`, `enabledModels`) and the
//! `--list-models` table. Pure functions over model lists: the caller decides which models are
//! candidates (all models for `--model`, models with auth for scopes and listings).
//!
//! Matching rules follow the reference: exact `provider/id` or id (case-insensitive, ambiguous ids
//! do not match), then substring of id or name preferring undated aliases; `:level` suffixes are
//! split off the last colon only when the whole pattern does not match; globs are minimatch-like.

use std::cmp::Ordering;

use super::matching::{fuzzy_matches, locale_compare};
use super::model::{Model, ThinkingLevel};
use super::registry::{ModelSource, default_model_for};
use super::{Diagnostic, ResolvedModel};
use crate::glob::{Glob, GlobOptions};

/// Why `--provider`/`--model` resolved to nothing; `main` prints `Error: <Display>`.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    /// The registry is empty.
    NoModels,
    UnknownProvider(String),
    /// No model matches (the pattern as shown: `provider/pattern` when a provider was given).
    NotFound(String),
    /// `--api-key` without a model to give it to.
    ApiKeyWithoutModel,
    /// An id several providers have, credentials not telling which (1.6.0's whole sentence).
    Ambiguous(String),
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelError::NoModels => f.write_str(
                "No models available. Check your installation or add models to models.json.",
            ),
            ModelError::UnknownProvider(name) => write!(
                f,
                "Unknown provider \"{name}\". Use --list-models to see available providers/models."
            ),
            ModelError::NotFound(shown) => write!(
                f,
                "Model \"{shown}\" not found. Use --list-models to see available models."
            ),
            ModelError::Ambiguous(sentence) => f.write_str(sentence),
            ModelError::ApiKeyWithoutModel => f.write_str(
                "--api-key requires a model to be specified via --model, --provider/--model, or --models",
            ),
        }
    }
}

impl std::error::Error for ModelError {}

/// A `--models` entry resolved to a model, with the level from its `:level` suffix if any.
#[derive(Clone, Debug)]
pub struct ScopedModel {
    pub model: Model,
    pub thinking: Option<ThinkingLevel>,
}

/// Ids without a `-YYYYMMDD` date suffix (or ending in `-latest`) count as aliases.
fn is_alias(id: &str) -> bool {
    if id.ends_with("-latest") {
        return true;
    }
    let bytes = id.as_bytes();
    let dated = bytes.len() >= 9
        && bytes[bytes.len() - 9] == b'-'
        && bytes[bytes.len() - 8..].iter().all(u8::is_ascii_digit);
    !dated
}

/// Exact `provider/id` or bare id match, case-insensitive; ambiguity means no match.
pub fn find_exact_reference<'a>(reference: &str, models: &'a [Model]) -> Option<&'a Model> {
    let trimmed = reference.trim();
    if trimmed.is_empty() {
        return None;
    }
    let lower = trimmed.to_lowercase();
    let canonical: Vec<&Model> = models
        .iter()
        .filter(|m| format!("{}/{}", m.provider, m.id).to_lowercase() == lower)
        .collect();
    match canonical.len() {
        1 => return Some(canonical[0]),
        n if n > 1 => return None,
        _ => {}
    }
    if let Some((provider, id)) = trimmed.split_once('/') {
        let (provider, id) = (provider.trim().to_lowercase(), id.trim().to_lowercase());
        if !provider.is_empty() && !id.is_empty() {
            let matches: Vec<&Model> = models
                .iter()
                .filter(|m| m.provider.to_lowercase() == provider && m.id.to_lowercase() == id)
                .collect();
            match matches.len() {
                1 => return Some(matches[0]),
                n if n > 1 => return None,
                _ => {}
            }
        }
    }
    let by_id: Vec<&Model> = models
        .iter()
        .filter(|m| m.id.to_lowercase() == lower)
        .collect();
    (by_id.len() == 1).then(|| by_id[0])
}

fn try_match<'a>(pattern: &str, models: &'a [Model]) -> Option<&'a Model> {
    if let Some(exact) = find_exact_reference(pattern, models) {
        return Some(exact);
    }
    best_fuzzy(fuzzy_id_or_name(pattern, models))
}

struct PatternMatch<'a> {
    model: Option<&'a Model>,
    thinking: Option<ThinkingLevel>,
    warning: Option<String>,
}

/// Whole pattern first, then `prefix:level` splits on the last colon (recursively).
/// `strict` (CLI `--model`): an invalid level suffix fails the pattern instead of warning.
fn parse_pattern<'a>(pattern: &str, models: &'a [Model], strict: bool) -> PatternMatch<'a> {
    if let Some(m) = try_match(pattern, models) {
        return PatternMatch {
            model: Some(m),
            thinking: None,
            warning: None,
        };
    }
    let Some((prefix, suffix)) = pattern.rsplit_once(':') else {
        return PatternMatch {
            model: None,
            thinking: None,
            warning: None,
        };
    };
    match ThinkingLevel::parse(suffix) {
        Some(level) => {
            let inner = parse_pattern(prefix, models, strict);
            if inner.model.is_some() {
                let thinking = if inner.warning.is_some() {
                    None
                } else {
                    Some(level)
                };
                return PatternMatch { thinking, ..inner };
            }
            inner
        }
        None if strict => PatternMatch {
            model: None,
            thinking: None,
            warning: None,
        },
        None => {
            let inner = parse_pattern(prefix, models, strict);
            if inner.model.is_some() {
                return PatternMatch {
                    model: inner.model,
                    thinking: None,
                    warning: Some(format!(
                        "Invalid thinking level \"{suffix}\" in pattern \"{pattern}\". Using default instead."
                    )),
                };
            }
            inner
        }
    }
}

/// How `--model` chooses between providers (1.6.0's `resolveCliModel`): `usable` says whether a
/// provider has credentials (ties between providers go to the usable one; `--api-key` makes none
/// usable, since it goes to whichever provider is chosen), `cli_thinking` is `--thinking`'s text.
pub struct CliModelRequest<'a> {
    pub provider: Option<&'a str>,
    pub pattern: &'a str,
    pub usable: &'a dyn Fn(&str) -> bool,
    pub inline_api_key: bool,
    pub cli_thinking: Option<&'a str>,
}

/// What a reference resolved to.
enum Reference {
    Resolved(Box<Model>, Option<ThinkingLevel>),
    Ambiguous {
        candidates: Vec<Model>,
        usable_count: usize,
    },
    NotFound,
}

/// The models one resolution reads: one provider's (`--provider`), else all of them, read
/// without building the full list until a fuzzy match needs it.
struct Pool<'a, S: ModelSource + ?Sized> {
    models: &'a S,
    constraint: Option<String>,
    usable: &'a dyn Fn(&str) -> bool,
}

impl<S: ModelSource + ?Sized> Pool<'_, S> {
    fn with_id(&self, id: &str) -> Vec<Model> {
        let mut found = self.models.with_id(id);
        if let Some(c) = &self.constraint {
            found.retain(|m| &m.provider == c);
        }
        found
    }

    fn providers(&self) -> Vec<String> {
        match &self.constraint {
            Some(c) => vec![c.clone()],
            None => self.models.provider_names(),
        }
    }

    fn all(&self) -> std::borrow::Cow<'_, [Model]> {
        match &self.constraint {
            Some(c) => self.models.provider_models(c).into(),
            None => self.models.all().into(),
        }
    }

    /// `provider/rest` with the longest provider name of the pool (provider names may hold a
    /// `/`): the provider as the pool spells it and the rest, trimmed and not empty.
    fn split_provider(&self, text: &str) -> Option<(String, String)> {
        let lower = text.to_lowercase();
        let mut best: Option<(String, String)> = None;
        for provider in self.providers() {
            let prefix = provider.trim().to_lowercase();
            if prefix.is_empty()
                || best
                    .as_ref()
                    .is_some_and(|(b, _)| b.len() >= provider.len())
            {
                continue;
            }
            let Some(slash) = lower.get(prefix.len()..).and_then(|rest| rest.find('/')) else {
                continue;
            };
            let slash = slash + prefix.len();
            if lower[..slash].trim() != prefix {
                continue;
            }
            let model_text = text[slash + 1..].trim();
            if !model_text.is_empty() {
                best = Some((provider, model_text.to_string()));
            }
        }
        best
    }

    /// The whole text, then its fuzzy matches, then `text:level` (a valid level only).
    fn resolve_text(&self, text: &str) -> Reference {
        if let Some(found) = self.select_reference(text) {
            return found;
        }
        if let Some(found) = self.select_fuzzy(fuzzy_id_or_name(text, &self.all())) {
            return found;
        }
        let Some((base, level)) = split_thinking_suffix(text) else {
            return Reference::NotFound;
        };
        match self.resolve_text(base) {
            Reference::Resolved(model, _) => Reference::Resolved(model, Some(level)),
            other => other,
        }
    }

    /// An exact id, or `provider/rest` (the named provider's id, else its fuzzy best) beside every
    /// model whose whole id is the text; credentials break ties between providers.
    fn select_reference(&self, text: &str) -> Option<Reference> {
        let raw = self.with_id(text);
        let named = self
            .split_provider(text)
            .and_then(|(provider, model_text)| {
                let provider_models = self.models.provider_models(&provider);
                let lower = model_text.to_lowercase();
                provider_models
                    .iter()
                    .find(|m| m.id.to_lowercase() == lower)
                    .or_else(|| raw.iter().find(|m| m.provider == provider))
                    .or_else(|| best_fuzzy(fuzzy_id_or_name(&model_text, &provider_models)))
                    .cloned()
            });
        let same = |a: &Model, b: &Model| a.provider == b.provider && a.id == b.id;
        let others: Vec<Model> = raw
            .into_iter()
            .filter(|m| named.as_ref().is_none_or(|n| !same(m, n)))
            .collect();
        let candidates: Vec<Model> = named.iter().chain(&others).cloned().collect();
        let first = candidates.first()?;
        if candidates.iter().all(|m| m.provider == first.provider) {
            return Some(Reference::Resolved(Box::new(first.clone()), None));
        }
        if let Some(named) = &named
            && (self.usable)(&named.provider)
        {
            return Some(Reference::Resolved(Box::new(named.clone()), None));
        }
        let usable_others: Vec<&Model> = others
            .iter()
            .filter(|m| (self.usable)(&m.provider))
            .collect();
        if let [only] = usable_others.as_slice() {
            return Some(Reference::Resolved(Box::new((*only).clone()), None));
        }
        if usable_others.is_empty()
            && let Some(named) = named
        {
            return Some(Reference::Resolved(Box::new(named), None));
        }
        Some(Reference::Ambiguous {
            usable_count: usable_others.len(),
            candidates,
        })
    }

    /// The best substring match; the same best id on several providers is ambiguous unless
    /// credentials narrow it to one.
    fn select_fuzzy(&self, matches: Vec<&Model>) -> Option<Reference> {
        let first = matches.first()?;
        let several = matches.iter().any(|m| m.provider != first.provider);
        let usable: Vec<&Model> = if several {
            matches
                .iter()
                .copied()
                .filter(|m| (self.usable)(&m.provider))
                .collect()
        } else {
            Vec::new()
        };
        let pool = if usable.is_empty() { &matches } else { &usable };
        let best = best_fuzzy(pool.clone())?;
        let tied: Vec<Model> = pool
            .iter()
            .filter(|m| m.id == best.id)
            .map(|m| (*m).clone())
            .collect();
        if tied.iter().all(|m| m.provider == best.provider) {
            return Some(Reference::Resolved(Box::new(best.clone()), None));
        }
        Some(Reference::Ambiguous {
            usable_count: if usable.is_empty() { 0 } else { tied.len() },
            candidates: tied,
        })
    }
}

/// Models whose id or name contains `text` (without case).
fn fuzzy_id_or_name<'m>(text: &str, models: &'m [Model]) -> Vec<&'m Model> {
    let lower = text.to_lowercase();
    models
        .iter()
        .filter(|m| m.id.to_lowercase().contains(&lower) || m.name.to_lowercase().contains(&lower))
        .collect()
}

/// Undated aliases first, then the highest id by localeCompare (the first in order on ties).
fn best_fuzzy(matches: Vec<&Model>) -> Option<&Model> {
    let (aliases, dated): (Vec<&Model>, Vec<&Model>) =
        matches.into_iter().partition(|m| is_alias(&m.id));
    let pool = if aliases.is_empty() { dated } else { aliases };
    let mut best: Option<&Model> = None;
    for m in pool {
        if best.is_none_or(|b| locale_compare(&m.id, &b.id) == Ordering::Greater) {
            best = Some(m);
        }
    }
    best
}

/// `base:level` on the last colon, for a valid level only.
fn split_thinking_suffix(text: &str) -> Option<(&str, ThinkingLevel)> {
    let (base, suffix) = text.rsplit_once(':')?;
    Some((base, ThinkingLevel::parse(suffix)?))
}

/// `--provider`/`--model` resolution as pi 1.6.0 does it (`core/model-resolver.js`): exact ids
/// and `provider/id` first (ties between providers broken by credentials, else the ambiguity
/// error), then fuzzy matches, then a `:level` suffix; a known provider with an unknown id gets
/// a custom model cloned from the provider's default.
pub fn resolve_cli_model(
    models: &(impl ModelSource + ?Sized),
    request: &CliModelRequest,
) -> Result<ResolvedModel, ModelError> {
    if !models.has_models() {
        return Err(ModelError::NoModels);
    }
    let constraint = match request.provider {
        Some(p) => match models.provider_spelling(p) {
            Some(c) => Some(c),
            None => return Err(ModelError::UnknownProvider(p.to_string())),
        },
        None => None,
    };
    let never = |_: &str| false;
    let pool = Pool {
        models,
        constraint,
        usable: if request.inline_api_key {
            &never
        } else {
            request.usable
        },
    };
    let text = request.pattern.trim();
    if text.is_empty() {
        return Err(ModelError::NotFound(request.pattern.to_string()));
    }
    match pool.resolve_text(text) {
        Reference::Resolved(model, thinking) => {
            return Ok(ResolvedModel {
                model: *model,
                thinking,
                warning: None,
            });
        }
        Reference::Ambiguous {
            candidates,
            usable_count,
        } => {
            let mut matches: Vec<String> = candidates
                .iter()
                .map(|m| format!("{}/{}", m.provider, m.id))
                .collect();
            matches.sort_by(|a, b| locale_compare(a, b));
            let hint = if request.inline_api_key {
                "--api-key does not choose a provider."
            } else if usable_count == 0 {
                "No matching provider is authenticated."
            } else {
                "More than one matching provider is authenticated."
            };
            return Err(ModelError::Ambiguous(format!(
                "Model \"{}\" is ambiguous across providers: {}. {hint} Use --provider or provider/model.",
                request.pattern,
                matches.join(", ")
            )));
        }
        Reference::NotFound => {}
    }
    let split = pool.split_provider(text);
    let provider = pool
        .constraint
        .clone()
        .or_else(|| split.as_ref().map(|(p, _)| p.clone()));
    let provider_models = provider
        .as_deref()
        .map(|p| models.provider_models(p))
        .unwrap_or_default();
    let (Some(provider), Some(first)) = (provider, provider_models.first()) else {
        return Err(ModelError::NotFound(request.pattern.to_string()));
    };
    let model_text = split.map_or_else(|| text.to_string(), |(_, rest)| rest);
    let (model_id, suffix_level) = match (request.cli_thinking, split_thinking_suffix(&model_text))
    {
        (None, Some((base, level))) => (base.to_string(), Some(level)),
        _ => (model_text.clone(), None),
    };
    let base = default_model_for(&provider)
        .and_then(|id| provider_models.iter().find(|m| m.id == id))
        .unwrap_or(first);
    let mut model = base.clone();
    model.id = model_id.clone();
    model.name = model_id.clone();
    let requested = request
        .cli_thinking
        .or(suffix_level.map(ThinkingLevel::as_str));
    if requested.is_some_and(|level| level != "off") {
        model.reasoning = true;
    }
    Ok(ResolvedModel {
        model,
        thinking: suffix_level,
        warning: Some(format!(
            "Model \"{model_id}\" not found for provider \"{provider}\". Using custom model id."
        )),
    })
}

/// `--models` / `enabledModels` patterns against the models with auth. Problems are warnings.
pub fn resolve_model_scope(
    available: &[Model],
    patterns: &[String],
) -> (Vec<ScopedModel>, Vec<Diagnostic>) {
    let mut scoped: Vec<ScopedModel> = Vec::new();
    let mut warnings = Vec::new();
    let push = |scoped: &mut Vec<ScopedModel>, model: &Model, thinking| {
        if !scoped
            .iter()
            .any(|s| s.model.provider == model.provider && s.model.id == model.id)
        {
            scoped.push(ScopedModel {
                model: model.clone(),
                thinking,
            });
        }
    };
    for pattern in patterns {
        if pattern.contains(['*', '?', '[']) {
            let (glob, thinking) = match pattern.rsplit_once(':') {
                Some((head, suffix)) => match ThinkingLevel::parse(suffix) {
                    Some(level) => (head, Some(level)),
                    None => (pattern.as_str(), None),
                },
                None => (pattern.as_str(), None),
            };
            let glob = Glob::new(glob, GlobOptions::MINIMATCH_NOCASE);
            let matching: Vec<&Model> = available
                .iter()
                .filter(|m| {
                    glob.matches(&format!("{}/{}", m.provider, m.id)) || glob.matches(&m.id)
                })
                .collect();
            if matching.is_empty() {
                warnings.push(Diagnostic::Warning(format!(
                    "No models match pattern \"{pattern}\""
                )));
            }
            for m in matching {
                push(&mut scoped, m, thinking);
            }
            continue;
        }
        let result = parse_pattern(pattern, available, false);
        if let Some(w) = result.warning {
            warnings.push(Diagnostic::Warning(w));
        }
        match result.model {
            Some(m) => push(&mut scoped, m, result.thinking),
            None => warnings.push(Diagnostic::Warning(format!(
                "No models match pattern \"{pattern}\""
            ))),
        }
    }
    (scoped, warnings)
}

/// The initial model without `--model`, scope or session (FACTS §1.8 steps 4–6): the saved
/// default if `find` knows it (credentials or not), else the first provider default among the
/// `available` models, else the first of them. `available` is only asked for when needed.
pub fn initial_model(
    find: &dyn Fn(&str, &str) -> Option<Model>,
    available: &dyn Fn() -> Vec<Model>,
    default_provider: Option<&str>,
    default_model: Option<&str>,
) -> Option<Model> {
    if let (Some(p), Some(id)) = (default_provider, default_model)
        && let Some(m) = find(p, id)
    {
        return Some(m);
    }
    let available = available();
    for (provider, id) in super::registry::DEFAULT_MODEL_PER_PROVIDER {
        if let Some(m) = available
            .iter()
            .find(|m| m.provider == *provider && m.id == *id)
        {
            return Some(m.clone());
        }
    }
    available.first().cloned()
}

// ---- --list-models ---------------------------------------------------------------------------------

/// `toFixed(1)` of a non-negative double: ties round up, as JavaScript does.
fn to_fixed_1(x: f64) -> String {
    let scaled = x * 10.0;
    let exact_tie = (x * 4.0).fract() == 0.0 && scaled.fract() == 0.5;
    if exact_tie {
        format!("{:.1}", (scaled.floor() + 1.0) / 10.0)
    } else {
        format!("{x:.1}")
    }
}

/// 200000 → "200K", 8192 → "8.2K", 1000000 → "1M".
pub fn format_token_count(count: u64) -> String {
    if count >= 1_000_000 {
        let millions = count as f64 / 1_000_000.0;
        return if millions.fract() == 0.0 {
            format!("{millions}M")
        } else {
            format!("{}M", to_fixed_1(millions))
        };
    }
    if count >= 1_000 {
        let thousands = count as f64 / 1_000.0;
        return if thousands.fract() == 0.0 {
            format!("{thousands}K")
        } else {
            format!("{}K", to_fixed_1(thousands))
        };
    }
    count.to_string()
}

/// The `--list-models [search]` output (stdout text, newline-terminated lines). `no_models_text`
/// is printed when nothing is available (the reference prints its login help there).
pub fn list_models(available: &[Model], search: Option<&str>, no_models_text: &str) -> String {
    if available.is_empty() {
        return format!("{no_models_text}\n");
    }
    let mut models: Vec<&Model> = match search {
        Some(q) if !q.trim().is_empty() => available
            .iter()
            .filter(|m| fuzzy_matches(q, &format!("{} {}", m.provider, m.id)))
            .collect(),
        _ => available.iter().collect(),
    };
    if models.is_empty() {
        return format!("No models matching \"{}\"\n", search.unwrap_or_default());
    }
    models.sort_by(|a, b| {
        locale_compare(&a.provider, &b.provider).then_with(|| locale_compare(&a.id, &b.id))
    });
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let header = [
        "provider", "model", "context", "max-out", "thinking", "images",
    ]
    .map(str::to_string);
    let rows: Vec<[String; 6]> = models
        .iter()
        .map(|m| {
            [
                m.provider.clone(),
                m.id.clone(),
                format_token_count(m.context_window),
                format_token_count(m.max_tokens),
                yes_no(m.reasoning),
                yes_no(m.supports_images()),
            ]
        })
        .collect();
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell}{}", " ".repeat(w - cell.chars().count())))
            .collect();
        out.push_str(&cells.join("  "));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::registry::builtin_models;

    fn by(models: &[Model], provider: &str) -> Vec<Model> {
        models
            .iter()
            .filter(|m| m.provider == provider)
            .cloned()
            .collect()
    }

    #[test]
    fn token_counts_format_like_javascript() {
        assert_eq!(format_token_count(200_000), "200K");
        assert_eq!(format_token_count(8192), "8.2K");
        assert_eq!(format_token_count(1_000_000), "1M");
        assert_eq!(format_token_count(1_047_576), "1.0M");
        assert_eq!(format_token_count(8250), "8.3K");
        assert_eq!(format_token_count(8350), "8.3K");
        assert_eq!(format_token_count(999), "999");
    }

    /// `--model` resolution with every provider authenticated.
    fn cli(
        models: &[Model],
        provider: Option<&str>,
        pattern: &str,
    ) -> Result<ResolvedModel, ModelError> {
        resolve_cli_model(
            models,
            &CliModelRequest {
                provider,
                pattern,
                usable: &|_| true,
                inline_api_key: false,
                cli_thinking: None,
            },
        )
    }

    /// 1.6.0's answers (`pi --mode rpc --model <id>` with GEMINI_API_KEY and OPENCODE_API_KEY,
    /// or the keys named): an id several providers have resolves to the one authenticated
    /// provider, else it is an error naming them all.
    #[test]
    fn ids_on_several_providers_are_chosen_by_credentials_or_ambiguous() {
        let all = builtin_models();
        let run = |pattern: &str, keys: &[&str], inline_api_key: bool| {
            let usable = |p: &str| keys.contains(&p);
            resolve_cli_model(
                all.as_slice(),
                &CliModelRequest {
                    provider: None,
                    pattern,
                    usable: &usable,
                    inline_api_key,
                    cli_thinking: None,
                },
            )
        };
        let keys = ["google", "opencode"];
        assert_eq!(
            run("kimi-k2.5", &keys, false).unwrap().model.provider,
            "opencode"
        );
        assert_eq!(
            run("gemini-3.7-flash", &keys, false)
                .unwrap_err()
                .to_string(),
            "Model \"gemini-3.7-flash\" is ambiguous across providers: google-vertex/gemini-3.7-flash, \
             google/gemini-3.7-flash, opencode/gemini-3.7-flash. More than one matching provider is \
             authenticated. Use --provider or provider/model."
        );
        assert_eq!(
            run("gemini-3.7-flash", &keys, true)
                .unwrap_err()
                .to_string(),
            "Model \"gemini-3.7-flash\" is ambiguous across providers: google-vertex/gemini-3.7-flash, \
             google/gemini-3.7-flash, opencode/gemini-3.7-flash. --api-key does not choose a \
             provider. Use --provider or provider/model."
        );
        assert_eq!(
            run("anthropic/claude-opus-5.5", &keys, false)
                .unwrap_err()
                .to_string(),
            "Model \"anthropic/claude-opus-5.5\" is ambiguous across providers: \
             openrouter/anthropic/claude-opus-5.5, vercel-ai-gateway/anthropic/claude-opus-5.5. No \
             matching provider is authenticated. Use --provider or provider/model."
        );
        let r = run("claude-opus-5-5", &["anthropic"], false).unwrap();
        assert_eq!(
            (r.model.provider.as_str(), r.model.max_tokens),
            ("anthropic", 128000)
        );
        let r = run("anthropic/claude-opus-5.5", &["vercel-ai-gateway"], false).unwrap();
        assert_eq!(r.model.provider, "vercel-ai-gateway");
        let r = run("gemini-3.7-flash", &["opencode"], false).unwrap();
        assert_eq!(r.model.provider, "opencode");
        // `provider/id` names its provider when that one is usable.
        let r = run("google/gemini-3.7-flash", &keys, false).unwrap();
        assert_eq!(r.model.provider, "google");
        // A custom id on a named provider takes a valid `:level` off the id.
        let r = cli(all.as_slice(), None, "openai/zzz:high").unwrap();
        assert_eq!(
            (r.model.id.as_str(), r.thinking, r.model.reasoning),
            ("zzz", Some(ThinkingLevel::High), true)
        );
        assert_eq!(
            r.warning.as_deref(),
            Some("Model \"zzz\" not found for provider \"openai\". Using custom model id.")
        );
    }

    #[test]
    fn cli_model_resolution_cases() {
        let all = builtin_models();
        // provider/id with a thinking suffix.
        let r = cli(all.as_slice(), None, "openai/gpt-5.4:high").unwrap();
        assert_eq!(
            (r.model.provider.as_str(), r.model.id.as_str(), r.thinking),
            ("openai", "gpt-5.4", Some(ThinkingLevel::High))
        );
        // --provider is case-insensitive and a repeated prefix is stripped.
        let r = cli(all.as_slice(), Some("OpenAI"), "openai/gpt-5.4").unwrap();
        assert_eq!(r.model.id, "gpt-5.4");
        // Invalid level suffix fails under --model.
        let e = cli(all.as_slice(), Some("openai"), "gpt-5.4:ultra").unwrap();
        assert_eq!(
            e.model.id, "gpt-5.4:ultra",
            "unknown id for a known provider is synthesized"
        );
        // Unknown provider.
        assert_eq!(
            cli(all.as_slice(), Some("nope"), "x")
                .unwrap_err()
                .to_string(),
            "Unknown provider \"nope\". Use --list-models to see available providers/models."
        );
        // Known provider, unknown model → clone of the provider default with a warning.
        let r = cli(all.as_slice(), Some("openai"), "zzz").unwrap();
        assert_eq!(r.model.id, "zzz");
        assert_eq!(r.model.name, "zzz");
        assert_eq!(
            r.model.api,
            all.iter()
                .find(|m| m.provider == "openai" && m.id == "gpt-5.4")
                .unwrap()
                .api
        );
        assert_eq!(
            r.warning.as_deref(),
            Some("Model \"zzz\" not found for provider \"openai\". Using custom model id.")
        );
        // Unknown everything.
        assert_eq!(
            cli(all.as_slice(), None, "definitely-not-a-model")
                .unwrap_err()
                .to_string(),
            "Model \"definitely-not-a-model\" not found. Use --list-models to see available models."
        );
        // Alias preference: the undated alias wins over dated ids (pi 1.6.0 picks the same).
        let r = cli(all.as_slice(), Some("anthropic"), "claude-haiku-4").unwrap();
        assert_eq!(r.model.id, "claude-haiku-4-5");
        // A catalog id resolves to its own entry in every spelling.
        for (provider, pattern) in [
            (None, "anthropic/claude-opus-5-5"),
            (Some("anthropic"), "claude-opus-5-5"),
            (Some("anthropic"), "anthropic/claude-opus-5-5"),
        ] {
            let r = cli(all.as_slice(), provider, pattern).unwrap();
            assert_eq!(r.warning, None, "{pattern}");
            assert_eq!(
                (r.model.provider.as_str(), r.model.name.as_str()),
                ("anthropic", "Claude Opus 5.5"),
                "{pattern}"
            );
            assert_eq!(r.model.max_tokens, 128000, "{pattern}");
        }
        // Ids with slashes that are not providers (openrouter style).
        let r = cli(all.as_slice(), None, "moonshotai/kimi-k2.6").unwrap();
        assert_eq!(r.model.provider, "moonshotai");
        let r = cli(all.as_slice(), None, "openrouter/moonshotai/kimi-k2.6").unwrap();
        assert_eq!(
            (r.model.provider.as_str(), r.model.id.as_str()),
            ("openrouter", "moonshotai/kimi-k2.6")
        );
    }

    #[test]
    fn matches_the_reference_on_ambiguous_patterns() {
        // Observed with `pi --mode rpc --model <pattern>` + get_state (1.6.0, every key set).
        let all = builtin_models();
        let cases = [
            (
                "sonnet",
                "amazon-bedrock",
                "us.anthropic.claude-sonnet-5-5",
                None,
            ),
            (
                "gemini",
                "openrouter",
                "google/gemini-nano-banana-2.1",
                None,
            ),
            (
                "openai/gpt-5.4:high",
                "openai",
                "gpt-5.4",
                Some(ThinkingLevel::High),
            ),
        ];
        for (pattern, provider, id, thinking) in cases {
            let r = cli(all.as_slice(), None, pattern).unwrap();
            assert_eq!(
                (r.model.provider.as_str(), r.model.id.as_str(), r.thinking),
                (provider, id, thinking),
                "{pattern}"
            );
            assert_eq!(r.warning, None);
        }
        let r = cli(all.as_slice(), Some("anthropic"), "opus").unwrap();
        assert_eq!(r.model.id, "claude-opus-5-5");
        let r = cli(all.as_slice(), None, "openai/gpt-4o:extended").unwrap();
        assert_eq!(
            (r.model.provider.as_str(), r.model.id.as_str()),
            ("openai", "gpt-4o:extended")
        );
        assert_eq!(
            r.warning.as_deref(),
            Some(
                "Model \"gpt-4o:extended\" not found for provider \"openai\". Using custom model id."
            )
        );
        let available: Vec<Model> = all
            .iter()
            .filter(|m| m.provider == "anthropic" || m.provider == "openai")
            .cloned()
            .collect();
        let patterns: Vec<String> = ["*sonnet*", "gpt-5.4:xhigh", "nothing*"]
            .map(String::from)
            .to_vec();
        let (scoped, warnings) = resolve_model_scope(&available, &patterns);
        assert_eq!(scoped[0].model.id, "claude-sonnet-4-5");
        assert_eq!(
            warnings,
            vec![Diagnostic::Warning(
                "No models match pattern \"nothing*\"".into()
            )]
        );
    }

    #[test]
    fn dated_ids_pick_the_latest() {
        let all = by(&builtin_models(), "anthropic");
        let dated: Vec<Model> = all.iter().filter(|m| !is_alias(&m.id)).cloned().collect();
        let r = parse_pattern("claude-sonnet-4-5", &dated, true);
        assert_eq!(r.model.unwrap().id, "claude-sonnet-4-5-20250929");
        assert!(is_alias("claude-3-5-haiku-latest"));
        assert!(!is_alias("claude-3-5-haiku-20241022"));
    }

    #[test]
    fn scope_patterns_globs_levels_and_warnings() {
        let available = by(&builtin_models(), "openai");
        let patterns: Vec<String> = [
            "gpt-5.4:xhigh",
            "openai/gpt-4o*:low",
            "gpt-4.1:bogus",
            "nothing*",
            "gpt-5.4",
        ]
        .map(String::from)
        .to_vec();
        let (scoped, warnings) = resolve_model_scope(&available, &patterns);
        assert_eq!(scoped[0].model.id, "gpt-5.4");
        assert_eq!(scoped[0].thinking, Some(ThinkingLevel::Xhigh));
        assert!(
            scoped
                .iter()
                .any(|s| s.model.id == "gpt-4o-mini" && s.thinking == Some(ThinkingLevel::Low))
        );
        let four_one = scoped.iter().find(|s| s.model.id == "gpt-4.1").unwrap();
        assert_eq!(four_one.thinking, None);
        assert_eq!(
            scoped.iter().filter(|s| s.model.id == "gpt-5.4").count(),
            1,
            "duplicates dropped"
        );
        assert_eq!(
            warnings,
            vec![
                Diagnostic::Warning("Invalid thinking level \"bogus\" in pattern \"gpt-4.1:bogus\". Using default instead.".into()),
                Diagnostic::Warning("No models match pattern \"nothing*\"".into()),
            ]
        );
    }

    #[test]
    fn thinking_levels_per_model() {
        use ThinkingLevel::*;
        let all = builtin_models();
        let find = |p: &str, id: &str| {
            all.iter()
                .find(|m| m.provider == p && m.id == id)
                .unwrap()
                .clone()
        };
        let gpt = find("openai", "gpt-5.4");
        assert_eq!(
            gpt.supported_thinking_levels(),
            vec![Off, Low, Medium, High, Xhigh]
        );
        assert_eq!(gpt.clamp_thinking_level(Minimal), Low);
        assert_eq!(gpt.clamp_thinking_level(Max), Xhigh);
        let gemini = find("google", "gemini-3.1-pro-preview");
        assert_eq!(gemini.supported_thinking_levels(), vec![Low, Medium, High]);
        assert_eq!(gemini.clamp_thinking_level(Medium), Medium);
        assert_eq!(gemini.clamp_thinking_level(Minimal), Low);
        assert_eq!(gemini.clamp_thinking_level(Xhigh), High);
        let sonnet = find("anthropic", "claude-sonnet-4-5");
        assert_eq!(
            sonnet.clamp_thinking_level(Xhigh),
            High,
            "no xhigh mapping → high"
        );
        let opus = find("anthropic", "claude-opus-4-7");
        assert_eq!(opus.clamp_thinking_level(Xhigh), Xhigh);
        assert_eq!(opus.clamp_thinking_level(Max), Max);
        let plain = find("openai", "gpt-4o");
        assert_eq!(plain.clamp_thinking_level(High), Off);
    }

    #[test]
    fn initial_model_prefers_settings_then_provider_defaults() {
        let all = builtin_models();
        let available: Vec<Model> = all
            .iter()
            .filter(|m| m.provider == "openai" || m.provider == "anthropic")
            .cloned()
            .collect();
        let find = |p: &str, id: &str| all.iter().find(|m| m.provider == p && m.id == id).cloned();
        let m = initial_model(&find, &|| available.clone(), None, None).unwrap();
        assert_eq!(
            (m.provider.as_str(), m.id.as_str()),
            ("anthropic", "claude-opus-5-5")
        );
        // Saved default wins even without auth.
        let m = initial_model(
            &find,
            &|| available.clone(),
            Some("google"),
            Some("gemini-3.1-pro-preview"),
        )
        .unwrap();
        assert_eq!(m.provider, "google");
        // Unknown saved default → provider defaults.
        let m = initial_model(&find, &Vec::new, Some("google"), Some("nope"));
        assert!(m.is_none());
    }

    #[test]
    fn list_models_matches_the_reference_table() {
        let all = builtin_models();
        let available: Vec<Model> = all
            .iter()
            .filter(|m| ["anthropic", "openai", "github-copilot"].contains(&m.provider.as_str()))
            .cloned()
            .collect();
        let expected = include_str!("testdata/list_models_small.txt");
        assert_eq!(list_models(&available, None, "none"), expected);
        // `pi --list-models "copilot opus"` with the same credentials.
        let searched = include_str!("testdata/list_models_search.txt");
        assert_eq!(
            list_models(&available, Some("copilot opus"), "none"),
            searched
        );
        assert_eq!(
            list_models(&available, Some("zzzz"), "none"),
            "No models matching \"zzzz\"\n"
        );
        assert_eq!(
            list_models(&[], None, "No models available."),
            "No models available.\n"
        );
    }

    #[test]
    fn list_models_sorts_every_catalog_model_like_the_reference() {
        let expected = include_str!("testdata/list_models_all.txt");
        assert_eq!(list_models(&builtin_models(), None, "none"), expected);
    }
}
