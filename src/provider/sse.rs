//! Server-sent events parser (pure): bytes in, `SseEvent`s out. LF, CR and CRLF line endings,
//! `event:`/`data:`/`id:` fields, comment lines ignored, multi-line data joined with LF.

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    pub data: String,
}
