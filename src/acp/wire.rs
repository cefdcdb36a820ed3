//! JSON-RPC 2.0 as ACP frames it (pure): one message per line, in, and the records written back.
//! Requests carry an `id` (string, number or null) and a `method`; notifications a `method` and no
//! `id`; responses an `id` and `result` or `error`. Batches (arrays) are not part of ACP and are
//! answered with one `-32600` as the SDK does.
//!
//! Input: a frame from `rpc::jsonl`. Output: `Incoming`, or the records of `response`, `failure`,
//! `notification` and `request`. Every record for stdout in ACP mode is built here.

use serde_json::{Map, Value, json};

use crate::rpc::Record;
use crate::rpc::jsonl::Frame;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP's "Resource not found" (an unknown session).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// One message from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The client's answer to a request pi-rs sent (`Err` holds the error object).
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
    /// Not a message: answered with `error` (`id` is null when it could not be read).
    Invalid {
        id: Value,
        error: RpcError,
    },
}

/// Reads one frame (`stdin_reader::spawn_framed`'s parser).
pub fn parse(frame: Frame) -> Incoming {
    let invalid = |id: Value, code: i64, message: String| Incoming::Invalid {
        id,
        error: RpcError::new(code, message),
    };
    let bytes = match frame {
        Frame::Record(bytes) => bytes,
        Frame::TooLong { len } => {
            return invalid(
                Value::Null,
                PARSE_ERROR,
                format!(
                    "Parse error: message of {len} bytes exceeds the {}-byte limit",
                    crate::rpc::stdin_reader::MAX_RECORD_BYTES
                ),
            );
        }
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return invalid(
            Value::Null,
            PARSE_ERROR,
            "Parse error: invalid UTF-8".into(),
        );
    };
    if text.trim().is_empty() {
        return invalid(Value::Null, PARSE_ERROR, "Parse error: empty line".into());
    }
    let value = match crate::rpc::jsonl::parse_value(text) {
        Ok(value) => value,
        Err(e) => return invalid(Value::Null, PARSE_ERROR, format!("Parse error: {e}")),
    };
    let Value::Object(mut object) = value else {
        return invalid(
            Value::Null,
            INVALID_REQUEST,
            "Invalid request: expected a JSON-RPC object (batches are not part of ACP)".into(),
        );
    };
    let id = object.remove("id");
    let valid_id = matches!(
        id,
        None | Some(Value::Null | Value::String(_) | Value::Number(_))
    );
    let reply_id = if valid_id {
        id.clone().unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid(
            reply_id,
            INVALID_REQUEST,
            "Invalid request: \"jsonrpc\" must be \"2.0\"".into(),
        );
    }
    if !valid_id {
        return invalid(
            reply_id,
            INVALID_REQUEST,
            "Invalid request: \"id\" must be a string, a number or null".into(),
        );
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            if !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null) {
                return invalid(
                    id,
                    INVALID_REQUEST,
                    "Invalid request: \"params\" must be an object or an array".into(),
                );
            }
            Incoming::Request { id, method, params }
        }
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => invalid(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "Invalid request: \"method\" must be a string".into(),
        ),
        (None, Some(id)) => match (object.remove("result"), object.remove("error")) {
            (Some(result), None) => Incoming::Response {
                id,
                outcome: Ok(result),
            },
            (None, Some(error)) => Incoming::Response {
                id,
                outcome: Err(error),
            },
            _ => invalid(
                id,
                INVALID_REQUEST,
                "Invalid request: a response has exactly one of \"result\" and \"error\"".into(),
            ),
        },
        (None, None) => invalid(
            Value::Null,
            INVALID_REQUEST,
            "Invalid request: no \"method\" and no \"id\"".into(),
        ),
    }
}

/// The params of a request as an object; anything else is an invalid-params error.
pub fn params_object(params: &Value) -> Result<&Map<String, Value>, RpcError> {
    params
        .as_object()
        .ok_or_else(|| RpcError::params("Invalid params: expected an object"))
}

/// A required string field of the params.
pub fn required_str<'a>(params: &'a Map<String, Value>, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::params(format!("Invalid params: \"{name}\" must be a string")))
}

pub fn response(id: &Value, result: Value) -> Record {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).into()
}

pub fn failure(id: &Value, error: &RpcError) -> Record {
    json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": error.code, "message": error.message}})
    .into()
}

pub fn notification(method: &str, params: Value) -> Record {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).into()
}

pub fn request(id: u64, method: &str, params: Value) -> Record {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).into()
}

/// `session/update` for one session.
pub fn session_update(session_id: &str, update: Value) -> Record {
    notification(
        "session/update",
        json!({"sessionId": session_id, "update": update}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Incoming {
        parse(Frame::Record(text.as_bytes().to_vec()))
    }

    fn code(incoming: &Incoming) -> (Value, i64) {
        match incoming {
            Incoming::Invalid { id, error } => (id.clone(), error.code),
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn messages_are_told_apart() {
        assert_eq!(
            parse_text(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
            Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({})
            }
        );
        assert_eq!(
            parse_text(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#),
            Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({"sessionId": "s"})
            }
        );
        assert_eq!(
            parse_text(r#"{"jsonrpc":"2.0","id":"x","result":{"a":1}}"#),
            Incoming::Response {
                id: json!("x"),
                outcome: Ok(json!({"a": 1}))
            }
        );
        assert_eq!(
            parse_text(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"m"}}"#),
            Incoming::Response {
                id: json!(7),
                outcome: Err(json!({"code": -1, "message": "m"}))
            }
        );
    }

    #[test]
    fn bad_input_gets_the_standard_codes_and_the_id_when_readable() {
        assert_eq!(code(&parse_text("{nope")), (Value::Null, PARSE_ERROR));
        assert_eq!(code(&parse_text("[]")), (Value::Null, INVALID_REQUEST));
        assert_eq!(code(&parse_text("3")), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            code(&parse_text(r#"{"id":4,"method":"initialize"}"#)),
            (json!(4), INVALID_REQUEST)
        );
        assert_eq!(
            code(&parse_text(r#"{"jsonrpc":"2.0","id":5,"method":7}"#)),
            (json!(5), INVALID_REQUEST)
        );
        assert_eq!(
            code(&parse_text(
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#
            )),
            (Value::Null, INVALID_REQUEST)
        );
        assert_eq!(
            code(&parse(Frame::TooLong { len: 10 })),
            (Value::Null, PARSE_ERROR)
        );
        assert_eq!(
            code(&parse(Frame::Record(vec![0xff, 0xfe]))),
            (Value::Null, PARSE_ERROR)
        );
    }
}
