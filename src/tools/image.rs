//! Images in files: the type from a file's first bytes (magic numbers, as pi's one detector for
//! the read tool and `@file` arguments), and the base64 image block a model is sent.
//!
//! Input: bytes. Output: a MIME type or an `ImageContent`. Pure; no I/O.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::messages::ImageContent;

/// How many leading bytes [`sniff_mime`] needs to decide (an APNG's `acTL` can sit that far in).
pub const SNIFF_BYTES: usize = 4100;

/// Supported image type of a file's first bytes (jpeg, png — not animated png —, gif, webp).
pub fn sniff_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some("image/jpeg");
    }
    if head.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
        // An acTL chunk before the first IDAT makes it an APNG, which pi does not treat as an image.
        return if is_apng(head) {
            None
        } else {
            Some("image/png")
        };
    }
    if head.starts_with(b"GIF8") {
        return Some("image/gif");
    }
    if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    None
}

fn is_apng(head: &[u8]) -> bool {
    let mut offset = 8;
    while offset + 8 <= head.len() {
        let length = u32::from_be_bytes([
            head[offset],
            head[offset + 1],
            head[offset + 2],
            head[offset + 3],
        ]) as usize;
        let kind = &head[offset + 4..offset + 8];
        if kind == b"acTL" {
            return true;
        }
        if kind == b"IDAT" {
            return false;
        }
        offset = offset.saturating_add(12).saturating_add(length);
    }
    false
}

/// The image block for a whole file's bytes of type `mime`.
pub fn content(bytes: &[u8], mime: &str) -> ImageContent {
    ImageContent {
        data: STANDARD.encode(bytes),
        mime_type: mime.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_types_are_sniffed_by_their_magic_bytes() {
        assert_eq!(sniff_mime(b"GIF89a"), Some("image/gif"));
        assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_mime(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(sniff_mime(b"hello"), None);
    }
}
