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
    let lower = pattern.to_lowercase();
    let matches: Vec<&Model> = models
        .iter()
        .filter(|m| m.id.to_lowercase().contains(&lower) || m.name.to_lowercase().contains(&lower))
        .collect();
    let (aliases, dated): (Vec<&Model>, Vec<&Model>) =
        matches.into_iter().partition(|m| is_alias(&m.id));
    let pool = if aliases.is_empty() { dated } else { aliases };
    // Highest id by localeCompare; the first such model in registry order on ties (stable sort).
    let mut best: Option<&Model> = None;
    for m in pool {
        if best.is_none_or(|b| locale_compare(&m.id, &b.id) == Ordering::Greater) {
            best = Some(m);
        }
    }
    best
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

/// `--provider`/`--model` resolution (FACTS §1.9).
pub fn resolve_cli_model(
    models: &(impl ModelSource + ?Sized),
    provider: Option<&str>,
    pattern: &str,
) -> Result<ResolvedModel, ModelError> {
    if !models.has_models() {
        return Err(ModelError::NoModels);
    }
    let canonical_provider = |name: &str| models.provider_spelling(name);
    let mut resolved_provider = match provider {
        Some(p) => match canonical_provider(p) {
            Some(c) => Some(c),
            None => return Err(ModelError::UnknownProvider(p.to_string())),
        },
        None => None,
    };
    let found = |m: &Model, thinking, warning| ResolvedModel {
        model: m.clone(),
        thinking,
        warning,
    };

    let mut pattern_part = pattern.to_string();
    let mut inferred = false;
    if resolved_provider.is_none()
        && let Some((maybe_provider, rest)) = pattern.split_once('/')
        && let Some(c) = canonical_provider(maybe_provider)
    {
        resolved_provider = Some(c);
        pattern_part = rest.to_string();
        inferred = true;
    }
    if resolved_provider.is_none()
        && let Some(m) = models.exact_id_or_reference(pattern)
    {
        return Ok(ResolvedModel {
            model: m,
            thinking: None,
            warning: None,
        });
    }
    if let (Some(_), Some(p)) = (provider, &resolved_provider) {
        let prefix = format!("{p}/");
        if pattern.to_lowercase().starts_with(&prefix.to_lowercase()) {
            pattern_part = pattern[prefix.len()..].to_string();
        }
    }
    let provider_models = resolved_provider
        .as_deref()
        .map(|p| models.provider_models(p));
    let candidates = provider_models.as_deref().unwrap_or_else(|| models.all());
    let result = parse_pattern(&pattern_part, candidates, true);
    if let Some(m) = result.model {
        return Ok(found(m, result.thinking, result.warning));
    }
    if inferred {
        if let Some(m) = models.exact_id_or_reference(pattern) {
            return Ok(ResolvedModel {
                model: m,
                thinking: None,
                warning: None,
            });
        }
        let fallback = parse_pattern(pattern, models.all(), true);
        if let Some(m) = fallback.model {
            return Ok(found(m, fallback.thinking, fallback.warning));
        }
    }
    if let (Some(p), Some(provider_models)) = (&resolved_provider, &provider_models)
        && let Some(first) = provider_models.first()
    {
        let base = default_model_for(p)
            .and_then(|id| provider_models.iter().find(|m| m.id == id))
            .unwrap_or(first);
        let mut model = base.clone();
        model.id = pattern_part.clone();
        model.name = pattern_part.clone();
        let note = format!(
            "Model \"{pattern_part}\" not found for provider \"{p}\". Using custom model id."
        );
        let warning = match result.warning {
            Some(w) => format!("{w} {note}"),
            None => note,
        };
        return Ok(ResolvedModel {
            model,
            thinking: None,
            warning: Some(warning),
        });
    }
    let display = match &resolved_provider {
        Some(p) => format!("{p}/{pattern_part}"),
        None => pattern.to_string(),
    };
    Err(ModelError::NotFound(display))
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

/// The initial model without `--model`, scope or session (FACTS §1.8 steps 4–6).
pub fn initial_model(
    all: &[Model],
    available: &[Model],
    default_provider: Option<&str>,
    default_model: Option<&str>,
) -> Option<Model> {
    if let (Some(p), Some(id)) = (default_provider, default_model)
        && let Some(m) = all.iter().find(|m| m.provider == p && m.id == id)
    {
        return Some(m.clone());
    }
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

    #[test]
    fn cli_model_resolution_cases() {
        let all = builtin_models();
        // provider/id with a thinking suffix.
        let r = resolve_cli_model(all.as_slice(), None, "openai/gpt-5.4:high").unwrap();
        assert_eq!(
            (r.model.provider.as_str(), r.model.id.as_str(), r.thinking),
            ("openai", "gpt-5.4", Some(ThinkingLevel::High))
        );
        // --provider is case-insensitive and a repeated prefix is stripped.
        let r = resolve_cli_model(all.as_slice(), Some("OpenAI"), "openai/gpt-5.4").unwrap();
        assert_eq!(r.model.id, "gpt-5.4");
        // Invalid level suffix fails under --model.
        let e = resolve_cli_model(all.as_slice(), Some("openai"), "gpt-5.4:ultra").unwrap();
        assert_eq!(
            e.model.id, "gpt-5.4:ultra",
            "unknown id for a known provider is synthesized"
        );
        // Unknown provider.
        assert_eq!(
            resolve_cli_model(all.as_slice(), Some("nope"), "x")
                .unwrap_err()
                .to_string(),
            "Unknown provider \"nope\". Use --list-models to see available providers/models."
        );
        // Known provider, unknown model → clone of the provider default with a warning.
        let r = resolve_cli_model(all.as_slice(), Some("openai"), "zzz").unwrap();
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
            resolve_cli_model(all.as_slice(), None, "definitely-not-a-model")
                .unwrap_err()
                .to_string(),
            "Model \"definitely-not-a-model\" not found. Use --list-models to see available models."
        );
        // Alias preference: the undated alias wins over dated ids (pi 1.6.0 picks the same).
        let r = resolve_cli_model(all.as_slice(), Some("anthropic"), "claude-haiku-4").unwrap();
        assert_eq!(r.model.id, "claude-haiku-4-5");
        // A catalog id resolves to its own entry in every spelling.
        for (provider, pattern) in [
            (None, "anthropic/claude-opus-5-5"),
            (None, "claude-opus-5-5"),
            (Some("anthropic"), "claude-opus-5-5"),
            (Some("anthropic"), "anthropic/claude-opus-5-5"),
        ] {
            let r = resolve_cli_model(all.as_slice(), provider, pattern).unwrap();
            assert_eq!(r.warning, None, "{pattern}");
            assert_eq!(
                (r.model.provider.as_str(), r.model.name.as_str()),
                ("anthropic", "Claude Opus 5.5"),
                "{pattern}"
            );
            assert_eq!(r.model.max_tokens, 128000, "{pattern}");
        }
        // Ids with slashes that are not providers (openrouter style).
        let r = resolve_cli_model(all.as_slice(), None, "moonshotai/kimi-k2.6").unwrap();
        assert_eq!(r.model.provider, "moonshotai");
        let r = resolve_cli_model(all.as_slice(), None, "openrouter/moonshotai/kimi-k2.6").unwrap();
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
            let r = resolve_cli_model(all.as_slice(), None, pattern).unwrap();
            assert_eq!(
                (r.model.provider.as_str(), r.model.id.as_str(), r.thinking),
                (provider, id, thinking),
                "{pattern}"
            );
            assert_eq!(r.warning, None);
        }
        let r = resolve_cli_model(all.as_slice(), Some("anthropic"), "opus").unwrap();
        assert_eq!(r.model.id, "claude-opus-5-5");
        let r = resolve_cli_model(all.as_slice(), None, "openai/gpt-4o:extended").unwrap();
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
        let m = initial_model(&all, &available, None, None).unwrap();
        assert_eq!(
            (m.provider.as_str(), m.id.as_str()),
            ("anthropic", "claude-opus-5-5")
        );
        // Saved default wins even without auth.
        let m = initial_model(
            &all,
            &available,
            Some("google"),
            Some("gemini-3.1-pro-preview"),
        )
        .unwrap();
        assert_eq!(m.provider, "google");
        // Unknown saved default → provider defaults.
        let m = initial_model(&all, &available[..0], Some("google"), Some("nope"));
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
