//! JSON-RPC 2.0 as MCP uses it (pure): building requests, notifications and responses, and
//! sorting what a server sends into responses, requests and notifications. Our request ids are
//! numbers; a server's ids (its own requests to us) are echoed back as they came.

use serde_json::{Value, json};

/// The protocol version we ask for, and the versions we accept from a server that answers with
/// an older one (its latest), as pi does.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 4] = [
    LATEST_PROTOCOL_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

pub const METHOD_NOT_FOUND: i64 = -32601;

pub fn request(id: u64, method: &str, params: Option<Value>) -> Value {
    let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(params) = params {
        message["params"] = params;
    }
    message
}

pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut message = json!({"jsonrpc": "2.0", "method": method});
    if let Some(params) = params {
        message["params"] = params;
    }
    message
}

pub fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// One message from a server.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// An answer to our request `id`: its result, or the error's message.
    Response {
        id: u64,
        outcome: Result<Value, String>,
    },
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
}

/// Sorts a parsed message; `Err` says why it is not a valid JSON-RPC message for us.
pub fn classify(message: Value) -> Result<Incoming, String> {
    let Value::Object(mut map) = message else {
        return Err("not a JSON object".into());
    };
    let method = map
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let params = map.remove("params").unwrap_or(Value::Null);
    match (map.remove("id"), method) {
        (Some(id), Some(method)) if !id.is_null() => Ok(Incoming::Request { id, method, params }),
        (None, Some(method)) => Ok(Incoming::Notification { method, params }),
        (Some(id), None) => {
            let id = id
                .as_u64()
                .or_else(|| id.as_str().and_then(|s| s.parse().ok()))
                .ok_or_else(|| format!("response with an id we never sent: {id}"))?;
            if let Some(error) = map.get("error") {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error");
                let code = error.get("code").and_then(Value::as_i64);
                let text = match code {
                    Some(code) => format!("MCP error {code}: {message}"),
                    None => message.to_string(),
                };
                return Ok(Incoming::Response {
                    id,
                    outcome: Err(text),
                });
            }
            match map.remove("result") {
                Some(result) => Ok(Incoming::Response {
                    id,
                    outcome: Ok(result),
                }),
                None => Err("response without result or error".into()),
            }
        }
        _ => Err("not a JSON-RPC message".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_sorted() {
        assert_eq!(
            classify(json!({"jsonrpc":"2.0","id":3,"result":{"a":1}})).unwrap(),
            Incoming::Response {
                id: 3,
                outcome: Ok(json!({"a":1}))
            }
        );
        assert_eq!(
            classify(json!({"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad"}}))
                .unwrap(),
            Incoming::Response {
                id: 4,
                outcome: Err("MCP error -32602: bad".into())
            }
        );
        assert_eq!(
            classify(json!({"jsonrpc":"2.0","id":"s1","method":"ping"})).unwrap(),
            Incoming::Request {
                id: json!("s1"),
                method: "ping".into(),
                params: Value::Null
            }
        );
        assert!(matches!(
            classify(
                json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}})
            )
            .unwrap(),
            Incoming::Notification { .. }
        ));
        assert!(classify(json!([1])).is_err());
        assert!(classify(json!({"id":"x","result":{}})).is_err());
        assert!(classify(json!({"id":1})).is_err());
        assert_eq!(
            request(1, "ping", None),
            json!({"jsonrpc":"2.0","id":1,"method":"ping"})
        );
    }
}
