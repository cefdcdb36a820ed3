//! The `models` global of scripts (pi 1.6.0 `docs/codemode.md`, "Models"): the model catalog
//! by type, and `classify()` / `generateImages()`. pi-rs's catalog has chat models only, so the
//! `image` and `classifier` lists are empty and those two calls fail with 1.6.0's "unknown
//! model" errors (after 1.6.0's own argument checks). Chat models are listed but cannot run.

use serde_json::Value;

/// The host globals a script's `models` object is made of.
pub const GLOBALS: [&str; 5] = [
    "models.getModelsOfType",
    "models.getAvailableOfType",
    "models.getModelOfType",
    "models.classify",
    "models.generateImages",
];

const TYPES: [&str; 3] = ["chat", "image", "classifier"];

/// The catalog as a script sees it: `all(provider)` every known model, `available(provider)`
/// those whose provider has credentials; each entry a `ModelInfo` object.
pub struct Catalog<'a> {
    pub all: &'a dyn Fn(Option<&str>) -> Vec<Value>,
    pub available: &'a dyn Fn(Option<&str>) -> Vec<Value>,
}

/// A catalog entry for scripts: `headers` left out (models.json headers can carry credentials).
pub fn model_info(mut model: Value) -> Value {
    if let Value::Object(fields) = &mut model {
        fields.remove("headers");
    }
    model
}

fn type_of(model: &Value) -> &str {
    model.get("type").and_then(Value::as_str).unwrap_or("chat")
}

fn model_type(value: &Value) -> Result<&str, String> {
    match value.as_str() {
        Some(t) if TYPES.contains(&t) => Ok(t),
        _ => Err(format!(
            "Unknown model type {}. Use \"chat\", \"image\", or \"classifier\".",
            js_json(value)
        )),
    }
}

fn provider(value: &Value) -> Result<Option<&str>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        _ => Err("provider must be a string".into()),
    }
}

/// `JSON.stringify` of an argument (`undefined` arrives as `null`).
fn js_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn with_article(word: &str) -> String {
    match word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {word}"),
        false => format!("a {word}"),
    }
}

/// A script value in an error message: `null`, `a string`, `an array`, or its keys.
fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Array(items) if items.is_empty() => "an empty array".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(fields) if fields.is_empty() => "{}".into(),
        Value::Object(fields) => {
            let keys: Vec<&str> = fields.keys().take(6).map(String::as_str).collect();
            let more = if fields.len() > 6 { ", ..." } else { "" };
            format!("{{ {}{more} }}", keys.join(", "))
        }
        Value::String(_) => "a string".into(),
        Value::Number(_) => "a number".into(),
        Value::Bool(_) => "a boolean".into(),
    }
}

fn of_type(models: Vec<Value>, wanted: &str) -> Vec<Value> {
    models
        .into_iter()
        .filter(|m| type_of(m) == wanted)
        .map(model_info)
        .collect()
}

fn find(catalog: &Catalog, wanted: &str, provider: &str, id: &str) -> Option<Value> {
    of_type((catalog.all)(Some(provider)), wanted)
        .into_iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
}

/// One `models.*` call: its value, or the error the script's promise rejects with.
pub fn call(name: &str, args: &Value, catalog: &Catalog) -> Result<Option<Value>, String> {
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    match name {
        "models.getModelsOfType" => {
            let wanted = model_type(arg(0))?;
            let models = (catalog.all)(provider(arg(1))?);
            Ok(Some(Value::Array(of_type(models, wanted))))
        }
        "models.getAvailableOfType" => {
            let wanted = model_type(arg(0))?;
            let models = (catalog.available)(provider(arg(1))?);
            Ok(Some(Value::Array(of_type(models, wanted))))
        }
        "models.getModelOfType" => {
            let (Some(provider), Some(id)) = (arg(1).as_str(), arg(2).as_str()) else {
                let given: Vec<String> = args
                    .as_array()
                    .map(|a| a.iter().map(describe_value).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "models.getModelOfType(type, provider, id) expects three strings, got ({}). The provider and the id are separate arguments, for example models.getModelOfType(\"classifier\", \"typesafe\", \"jev-latest\").",
                    given.join(", ")
                ));
            };
            let wanted = model_type(arg(0))?;
            Ok(find(catalog, wanted, provider, id))
        }
        "models.classify" => run(name, "classifier", arg(0), catalog),
        "models.generateImages" => run(name, "image", arg(0), catalog),
        _ => Err(format!("{name} is not a models function")),
    }
}

/// `classify()` / `generateImages()`: the model is resolved by provider and id alone; pi-rs
/// has no model of either type, so a resolved one cannot exist and the call fails as 1.6.0's
/// does for an unknown model.
fn run(
    name: &str,
    wanted: &str,
    model: &Value,
    catalog: &Catalog,
) -> Result<Option<Value>, String> {
    let list_hint = format!(
        "List the {wanted} models you can use with models.getAvailableOfType(\"{wanted}\")."
    );
    let (Some(provider), Some(id)) = (
        model.get("provider").and_then(Value::as_str),
        model.get("id").and_then(Value::as_str),
    ) else {
        let undefined_hint = match model {
            Value::Null => {
                " models.getModelOfType() returns undefined for an unknown provider or id."
            }
            _ => "",
        };
        return Err(format!(
            "{name}() expects {} model as its first argument, got {}.{undefined_hint} {list_hint}",
            with_article(wanted),
            describe_value(model)
        ));
    };
    let reference = format!("{provider}/{id}");
    if find(catalog, wanted, provider, id).is_some() {
        return Err(format!(
            "{name}() cannot run \"{reference}\": pi-rs has no {wanted} provider."
        ));
    }
    let actual = TYPES
        .iter()
        .find(|t| **t != wanted && find(catalog, t, provider, id).is_some());
    Err(match actual {
        Some(actual) => format!(
            "\"{reference}\" is {} model, not {} model. {list_hint}",
            with_article(actual),
            with_article(wanted)
        ),
        None => format!("Unknown {wanted} model \"{reference}\". {list_hint}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_by_type_and_fails_runs_as_pi_does() {
        let all = |provider: Option<&str>| -> Vec<Value> {
            let models = vec![
                json!({"provider": "p", "id": "chat-1", "headers": {"x": "secret"}}),
                json!({"provider": "q", "id": "chat-2"}),
            ];
            models
                .into_iter()
                .filter(|m| provider.is_none_or(|p| m["provider"] == p))
                .collect()
        };
        let none = |_: Option<&str>| -> Vec<Value> { Vec::new() };
        let catalog = Catalog {
            all: &all,
            available: &none,
        };
        assert_eq!(
            call("models.getModelsOfType", &json!(["chat", "p"]), &catalog).unwrap(),
            Some(json!([{"provider": "p", "id": "chat-1"}]))
        );
        assert_eq!(
            call("models.getModelsOfType", &json!(["image"]), &catalog).unwrap(),
            Some(json!([]))
        );
        assert_eq!(
            call("models.getModelsOfType", &json!(["llm"]), &catalog).unwrap_err(),
            "Unknown model type \"llm\". Use \"chat\", \"image\", or \"classifier\"."
        );
        assert_eq!(
            call(
                "models.getModelOfType",
                &json!(["chat", "q", "chat-2"]),
                &catalog
            )
            .unwrap(),
            Some(json!({"provider": "q", "id": "chat-2"}))
        );
        assert_eq!(
            call(
                "models.getModelOfType",
                &json!(["chat", "q/chat-2"]),
                &catalog
            )
            .unwrap_err(),
            "models.getModelOfType(type, provider, id) expects three strings, got (a string, a string). The provider and the id are separate arguments, for example models.getModelOfType(\"classifier\", \"typesafe\", \"jev-latest\")."
        );
        assert_eq!(
            call(
                "models.classify",
                &json!([{"provider": "p", "id": "chat-1"}, {}]),
                &catalog
            )
            .unwrap_err(),
            "\"p/chat-1\" is a chat model, not a classifier model. List the classifier models you can use with models.getAvailableOfType(\"classifier\")."
        );
        assert_eq!(
            call("models.generateImages", &json!([null, {}]), &catalog).unwrap_err(),
            "models.generateImages() expects an image model as its first argument, got null. models.getModelOfType() returns undefined for an unknown provider or id. List the image models you can use with models.getAvailableOfType(\"image\")."
        );
    }
}
