//! JSON serialized once and shared by every record (and the session entry) that carries it.
//!
//! A `SharedJson` is one JSON value as a sequence of pieces written one after another. Most are
//! one piece. A streamed assistant message is several: the JSON string literal of each long text
//! or thinking block, made once for that block's `text_end`/`thinking_end`, is a piece of the
//! message's own JSON too (`assistant_message`), so a long reply is held once as text (the
//! context) and once serialized — however many records (`text_end`, `message_end`, `turn_end`,
//! `agent_end`) a stalled client leaves queued, and in the session entry.
//!
//! Pieces are only ever split between JSON tokens, never inside a string, so redaction (which
//! works on decoded strings) can look at each piece on its own.

use std::sync::Arc;

use serde::Serialize;

use crate::messages::{AgentMessage, AssistantMessage, ContentBlock, TextContent, ThinkingContent};

#[derive(Clone, Debug, PartialEq)]
pub struct SharedJson(Arc<Vec<Arc<String>>>);

impl SharedJson {
    /// Whether this is a serialized `role:"system"` message (pi 1.6.0's prompt state; the role
    /// is always its first key).
    pub fn is_system_message(&self) -> bool {
        self.pieces()
            .next()
            .is_some_and(|first| first.starts_with(r#"{"role":"system""#))
    }

    /// The pieces, in order; concatenated they are the JSON text.
    pub fn pieces(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|piece| piece.as_str())
    }

    /// Total length in bytes.
    pub fn byte_len(&self) -> usize {
        self.0.iter().map(|piece| piece.len()).sum()
    }

    pub fn starts_with(&self, prefix: &str) -> bool {
        self.0
            .first()
            .is_some_and(|piece| piece.starts_with(prefix))
    }

    /// The whole text: borrowed when it is one piece, joined (a copy) otherwise.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self.0.as_slice() {
            [one] => std::borrow::Cow::Borrowed(one.as_str()),
            pieces => std::borrow::Cow::Owned(pieces.iter().map(|p| p.as_str()).collect()),
        }
    }

    /// Parses the value without joining the pieces.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        match self.0.as_slice() {
            [one] => serde_json::from_str(one),
            pieces => {
                let reader = pieces.iter().fold(
                    Box::new(std::io::empty()) as Box<dyn std::io::Read>,
                    |chain, piece| Box::new(std::io::Read::chain(chain, piece.as_bytes())),
                );
                serde_json::from_reader(reader)
            }
        }
    }
}

impl From<String> for SharedJson {
    fn from(text: String) -> SharedJson {
        SharedJson(Arc::new(vec![Arc::new(text)]))
    }
}

impl From<&str> for SharedJson {
    fn from(text: &str) -> SharedJson {
        SharedJson::from(text.to_string())
    }
}

/// Serializes `value` once, into a buffer sized from `size_hint` so a large message does not
/// grow by doubling.
pub fn shared_json<T: Serialize>(value: &T, size_hint: usize) -> SharedJson {
    SharedJson(Arc::new(vec![Arc::new(serialize(value, size_hint))]))
}

fn serialize<T: Serialize + ?Sized>(value: &T, size_hint: usize) -> String {
    let mut buffer = Vec::with_capacity(size_hint + 256);
    if serde_json::to_writer(&mut buffer, value).is_err() {
        buffer = b"null".to_vec();
    }
    buffer.shrink_to_fit();
    // serde_json writes valid UTF-8.
    String::from_utf8(buffer).unwrap_or_else(|_| "null".into())
}

/// A JSON string literal for `text`, serialized once (a block's whole text can be long).
pub fn json_string(text: &str) -> SharedJson {
    shared_json(&text, text.len() + text.len() / 16 + 2)
}

/// `message` serialized, sized from its texts. For an assistant message, each block in
/// `literals` (content index → the JSON string literal of that block's text or thinking, as its
/// end record carried it) reuses that literal as a piece instead of serializing the text again;
/// a literal whose length cannot fit its block (the text changed after its end) is not used.
/// Byte for byte what serializing `message` writes.
pub fn message(message: &AgentMessage, literals: &[(usize, SharedJson)]) -> SharedJson {
    let size_hint = match message {
        AgentMessage::Assistant(a) => a
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.len(),
                ContentBlock::Thinking(t) => t.thinking.len(),
                ContentBlock::ToolCall(_) => 256,
                ContentBlock::Image(i) => i.data.len(),
            })
            .sum(),
        _ => 1024,
    };
    let whole = || shared_json(message, size_hint + size_hint / 16);
    match message {
        AgentMessage::Assistant(assistant) if !literals.is_empty() => {
            assistant_in_pieces(assistant, literals).unwrap_or_else(whole)
        }
        _ => whole(),
    }
}

fn assistant_in_pieces(
    message: &AssistantMessage,
    literals: &[(usize, SharedJson)],
) -> Option<SharedJson> {
    const HEAD: &str = r#"{"role":"assistant","content":["#;
    let usable = |index: usize| {
        let (_, literal) = literals.iter().find(|(i, _)| *i == index)?;
        let text = match message.content.get(index)? {
            ContentBlock::Text(t) => &t.text,
            ContentBlock::Thinking(t) => &t.thinking,
            _ => return None,
        };
        // A literal is the text plus its quotes and escapes: never shorter.
        (literal.byte_len() >= text.len() + 2).then_some(literal)
    };
    // The message without content gives what comes around the content array.
    let frame = serialize(
        &AgentMessage::Assistant(message.clone_without_content()),
        256,
    );
    let tail = frame.strip_prefix(HEAD)?.strip_prefix(']')?;
    let mut pieces: Vec<Arc<String>> = Vec::with_capacity(2 + 2 * literals.len());
    let mut pending = String::from(HEAD);
    for (index, block) in message.content.iter().enumerate() {
        if index > 0 {
            pending.push(',');
        }
        let (Some(literal), Some(emptied)) = (usable(index), without_text(block)) else {
            pending.push_str(&serialize(block, 64));
            continue;
        };
        // The block with an empty text is `{"type":"text","text":""…}`: the literal goes where
        // the `""` is.
        let empty = serialize(&emptied, 64);
        let key = match block {
            ContentBlock::Thinking(_) => r#"{"type":"thinking","thinking":"#,
            _ => r#"{"type":"text","text":"#,
        };
        let after = empty.strip_prefix(key)?.strip_prefix("\"\"")?;
        pending.push_str(key);
        pieces.push(Arc::new(std::mem::take(&mut pending)));
        pieces.extend(literal.0.iter().cloned());
        pending.push_str(after);
    }
    pending.push(']');
    pending.push_str(tail);
    pieces.push(Arc::new(pending));
    Some(SharedJson(Arc::new(pieces)))
}

/// A text or thinking block with its text left out (everything else kept).
fn without_text(block: &ContentBlock) -> Option<ContentBlock> {
    match block {
        ContentBlock::Text(t) => Some(ContentBlock::Text(TextContent {
            text: String::new(),
            text_signature: t.text_signature.clone(),
        })),
        ContentBlock::Thinking(t) => Some(ContentBlock::Thinking(ThinkingContent {
            thinking: String::new(),
            thinking_signature: t.thinking_signature.clone(),
            redacted: t.redacted,
        })),
        ContentBlock::ToolCall(_) | ContentBlock::Image(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{StopReason, ToolCall};
    use serde_json::json;

    #[test]
    fn a_message_in_pieces_is_byte_identical_to_one_serialized_whole() {
        let mut message = AssistantMessage::empty("anthropic-messages", "p", "m");
        message.content = vec![
            ContentBlock::Thinking(ThinkingContent {
                thinking: "hm \"quoted\"\n".into(),
                thinking_signature: Some("sig".into()),
                redacted: None,
            }),
            ContentBlock::Text(TextContent {
                text: "Hello \u{2028} wörld".into(),
                text_signature: Some("ts".into()),
            }),
            ContentBlock::ToolCall(ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: json!({"command": "ls"}),
                thought_signature: None,
            }),
            ContentBlock::Text(TextContent::new("not ended")),
        ];
        message.stop_reason = StopReason::ToolUse;
        message.error_message = Some("x".into());
        message.extra.insert("later".into(), json!(1));
        let message = AgentMessage::Assistant(message);
        let AgentMessage::Assistant(assistant) = &message else {
            unreachable!()
        };
        let literals = vec![
            (0, json_string("hm \"quoted\"\n")),
            (1, json_string("Hello \u{2028} wörld")),
            // Stale: the text grew after its end record; serialized afresh.
            (3, json_string("")),
        ];
        let pieces = super::message(&message, &literals);
        assert!(pieces.pieces().count() > 1);
        let whole = serde_json::to_string(&message).unwrap();
        assert_eq!(pieces.text(), whole);
        assert_eq!(pieces.byte_len(), whole.len());
        assert!(pieces.starts_with(r#"{"role":"assistant""#));
        // The literal is shared, not copied.
        let ContentBlock::Text(_) = &assistant.content[1] else {
            unreachable!()
        };
        assert!(pieces.0.iter().any(|p| Arc::ptr_eq(p, &literals[1].1.0[0])));
        let parsed: AgentMessage = pieces.parse().unwrap();
        assert_eq!(parsed, message);
    }

    #[test]
    fn other_messages_are_one_piece() {
        let user = AgentMessage::User(crate::messages::UserMessage {
            content: crate::messages::UserContent::Text("hi".into()),
            timestamp: 1,
            extra: Default::default(),
        });
        let json = super::message(&user, &[]);
        assert_eq!(json.pieces().count(), 1);
        assert_eq!(json.text(), serde_json::to_string(&user).unwrap());
    }
}
