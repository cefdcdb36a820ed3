//! Reading pi's tagged objects — a message's `role`, a content block's `type` — and user
//! content (a string or a list of blocks) without serde's buffering. serde's derive reads an
//! internally tagged or untagged value into an intermediate tree first and then reads that tree
//! again; a long session types 100k messages at load, so that doubled the work. When the tag is
//! the object's first key, as pi and pi-rs always write it, the rest of the object goes straight
//! into the variant's struct; anywhere else, the object is collected into a JSON value first,
//! as serde's derive would.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Error, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A type read from an object whose variant is named by the key `TAG`.
pub(super) trait Tagged: Sized {
    const TAG: &'static str;
    const EXPECTING: &'static str;
    /// Reads the variant named `tag` from the rest of the object (the tag left out).
    fn variant<'de, D: Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error>;
}

pub(super) fn deserialize<'de, D: Deserializer<'de>, T: Tagged>(
    deserializer: D,
) -> Result<T, D::Error> {
    deserializer.deserialize_map(TaggedVisitor(PhantomData))
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(Text(first)) = map.next_key::<Text>()? else {
            return Err(A::Error::missing_field(T::TAG));
        };
        if first == T::TAG {
            let Text(tag) = map.next_value()?;
            return T::variant(&tag, MapAccessDeserializer::new(map));
        }
        let mut object = serde_json::Map::new();
        object.insert(first.into_owned(), map.next_value()?);
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            object.insert(key, value);
        }
        let tag = match object.shift_remove(T::TAG) {
            Some(Value::String(tag)) => tag,
            Some(_) => return Err(A::Error::custom(format!("`{}` is not a string", T::TAG))),
            None => return Err(A::Error::missing_field(T::TAG)),
        };
        T::variant(&tag, Value::Object(object)).map_err(A::Error::custom)
    }
}

/// A string, borrowed from the input when it holds no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: Error>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_string())))
            }
            fn visit_string<E: Error>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A list of content blocks in a list of exactly its size. serde's derive starts a list of
/// unknown length at room for four and doubles it; a session keeps 100k such lists, mostly of
/// one block.
pub(super) fn blocks<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<super::ContentBlock>, D::Error> {
    let mut blocks = Vec::deserialize(deserializer)?;
    blocks.shrink_to_fit();
    Ok(blocks)
}

/// User content: a string, or a list of content blocks.
pub(super) fn user_content<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<super::UserContent, D::Error> {
    struct ContentVisitor;
    impl<'de> Visitor<'de> for ContentVisitor {
        type Value = super::UserContent;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or an array of content blocks")
        }
        fn visit_str<E: Error>(self, text: &str) -> Result<super::UserContent, E> {
            Ok(super::UserContent::Text(text.to_string()))
        }
        fn visit_string<E: Error>(self, text: String) -> Result<super::UserContent, E> {
            Ok(super::UserContent::Text(text))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<super::UserContent, A::Error> {
            blocks(SeqAccessDeserializer::new(seq)).map(super::UserContent::Blocks)
        }
    }
    deserializer.deserialize_any(ContentVisitor)
}

#[cfg(test)]
mod tests {
    use crate::messages::{AgentMessage, ContentBlock, UserContent};
    use serde_json::json;

    #[test]
    fn the_tag_is_found_first_or_anywhere_with_the_same_result() {
        let first = r#"{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"toolCall","id":"c","name":"read","arguments":{"path":"x"}}],"api":"a","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":5,"extraKey":[1]}"#;
        let last = r#"{"content":[{"text":"a","type":"text"},{"id":"c","name":"read","arguments":{"path":"x"},"type":"toolCall"}],"api":"a","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":5,"extraKey":[1],"role":"assistant"}"#;
        let a: AgentMessage = serde_json::from_str(first).unwrap();
        let b: AgentMessage = serde_json::from_str(last).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            first,
            "written back as read"
        );
        let AgentMessage::Assistant(assistant) = &a else {
            panic!("not an assistant message");
        };
        assert_eq!(assistant.extra.get("extraKey"), Some(&json!([1])));
        assert!(
            !assistant.extra.contains_key("role"),
            "the tag is not an extra field"
        );
        assert_eq!(
            assistant.content.capacity(),
            2,
            "block lists are cut to size"
        );
        let from_value: AgentMessage =
            serde_json::from_value(json!({"timestamp": 1, "role": "user", "content": "hi"}))
                .unwrap();
        assert!(
            matches!(&from_value, AgentMessage::User(u) if u.content == UserContent::Text("hi".into()))
        );
    }

    #[test]
    fn bad_tags_and_content_are_errors() {
        for bad in [
            r#"{"role":"alien","content":"x","timestamp":1}"#,
            r#"{"content":"x","timestamp":1}"#,
            r#"{"content":"x","role":5,"timestamp":1}"#,
            r#"{"role":"user","content":5,"timestamp":1}"#,
            r#"{}"#,
            r#"[]"#,
        ] {
            assert!(serde_json::from_str::<AgentMessage>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<ContentBlock>(r#"{"type":"video","url":"x"}"#).is_err());
        let escaped: AgentMessage =
            serde_json::from_str(r#"{"r\u006fle":"us\u0065r","content":[],"timestamp":1}"#)
                .unwrap();
        assert!(
            matches!(escaped, AgentMessage::User(_)),
            "escaped keys and tags still match"
        );
    }
}
