//! Images in files: the type from a file's first bytes (magic numbers, as pi's one detector for
//! the read tool and `@file` arguments), and the base64 image block a model is sent — scaled
//! down to the model's input limits first, as pi 1.6.0 does (`process`).
//!
//! Input: bytes. Output: a MIME type or an `ImageContent`. Pure; no I/O. `process` decodes,
//! scales and encodes: CPU work callers keep off the agent loop (the read tool's thread, the
//! prompt-image worker).

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::imageops::FilterType;
use image::{DynamicImage, ImageDecoder, ImageReader};
use serde_json::Value;

use crate::messages::{ContentBlock, ImageContent, TextContent};

/// How large an image a model is sent (pi 1.6.0's `inputLimits.images.resize`, its defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResizeLimits {
    pub max_width: u32,
    pub max_height: u32,
    /// Of the base64 text.
    pub max_bytes: usize,
    pub jpeg_quality: u8,
}

impl Default for ResizeLimits {
    fn default() -> ResizeLimits {
        ResizeLimits {
            max_width: 2000,
            max_height: 2000,
            // 4.5 MiB of base64, below Anthropic's 5 MB.
            max_bytes: 4_718_592,
            jpeg_quality: 80,
        }
    }
}

impl ResizeLimits {
    /// A model's `inputLimits` (models.json) over the defaults: `images.resize.maxWidth`,
    /// `maxHeight`, `maxBytes`, `jpegQuality`; a value that is no positive number is ignored.
    pub fn from_input_limits(limits: Option<&Value>) -> ResizeLimits {
        let mut out = ResizeLimits::default();
        let Some(resize) = limits.map(|l| &l["images"]["resize"]) else {
            return out;
        };
        let number = |key: &str| resize[key].as_f64().filter(|n| n.is_finite() && *n >= 1.0);
        if let Some(n) = number("maxWidth") {
            out.max_width = n.min(f64::from(u32::MAX)) as u32;
        }
        if let Some(n) = number("maxHeight") {
            out.max_height = n.min(f64::from(u32::MAX)) as u32;
        }
        if let Some(n) = number("maxBytes") {
            out.max_bytes = n.min(usize::MAX as f64) as usize;
        }
        if let Some(n) = number("jpegQuality") {
            out.jpeg_quality = n.min(100.0) as u8;
        }
        out
    }
}

/// An image ready for the model, and the note that goes with it (the coordinate mapping of a
/// scaled image).
#[derive(Debug, PartialEq)]
pub struct Processed {
    pub image: ImageContent,
    pub note: Option<String>,
}

/// pi 1.6.0's text when an image cannot be made to fit (or cannot be decoded at all).
pub const OMITTED: &str =
    "[Image omitted: could not be resized below the inline image size limit.]";

/// pi 1.6.0's text when an image of another type (BMP) cannot be converted to PNG.
pub const NOT_CONVERTED: &str =
    "[Image omitted: could not be converted to a supported inline image format.]";

/// The type a model takes an image of MIME type `base` as (`image/jpg` is `image/jpeg`); `None`
/// for a type that is converted to PNG first (BMP).
fn inline_type(base: &str) -> Option<&'static str> {
    match base {
        "image/png" => Some("image/png"),
        "image/jpeg" | "image/jpg" => Some("image/jpeg"),
        "image/gif" => Some("image/gif"),
        "image/webp" => Some("image/webp"),
        _ => None,
    }
}

/// A MIME type without its parameters, lower case (`Image/PNG; x=y` is `image/png`).
fn base_mime(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// An image file as pi 1.6.0's `processImage` makes it ready: a type the model does not take
/// (BMP) converted to PNG first, then scaled into `limits` (`None`: `images.autoResize` off, no
/// scaling), with `[Image converted from <type> to <type>.]` ahead of any coordinate note.
pub fn prepare(
    bytes: &[u8],
    mime: &str,
    limits: Option<&ResizeLimits>,
) -> Result<Processed, String> {
    let converted;
    let base = base_mime(mime);
    let (bytes, mime, from) = match inline_type(&base) {
        Some(inline) => (bytes, inline, None),
        None => {
            converted = decode(bytes)
                .and_then(|image| encode_png(&image))
                .ok_or_else(|| NOT_CONVERTED.to_string())?;
            (&converted[..], "image/png", Some(base.as_str()))
        }
    };
    let mut processed = match limits {
        Some(limits) => process(bytes, mime, limits)?,
        None => Processed {
            image: content(bytes, mime),
            note: None,
        },
    };
    if let Some(from) = from.filter(|from| *from != processed.image.mime_type) {
        let hint = format!(
            "[Image converted from {from} to {}.]",
            processed.image.mime_type
        );
        processed.note = Some(match processed.note.take() {
            Some(note) => format!("{hint}\n{note}"),
            None => hint,
        });
    }
    Ok(processed)
}

/// The image as the model gets it: unchanged when within `limits` (pixels and base64 size),
/// otherwise scaled into them (Lanczos3) and re-encoded as the smaller of PNG and JPEG, then
/// JPEG at falling quality, then smaller still by quarters, as pi 1.6.0 does. `Err(OMITTED)`
/// when it does not decode or nothing fits.
pub fn process(bytes: &[u8], mime: &str, limits: &ResizeLimits) -> Result<Processed, String> {
    let decoded = decode(bytes).ok_or_else(|| OMITTED.to_string())?;
    let (width, height) = (decoded.width(), decoded.height());
    let base64_size = bytes.len().div_ceil(3) * 4;
    if width <= limits.max_width && height <= limits.max_height && base64_size < limits.max_bytes {
        return Ok(Processed {
            image: content(bytes, mime),
            note: None,
        });
    }
    let (mut target_w, mut target_h) = (width, height);
    if target_w > limits.max_width {
        target_h =
            js_round(f64::from(target_h) * f64::from(limits.max_width) / f64::from(target_w));
        target_w = limits.max_width;
    }
    if target_h > limits.max_height {
        target_w =
            js_round(f64::from(target_w) * f64::from(limits.max_height) / f64::from(target_h));
        target_h = limits.max_height;
    }
    let (mut w, mut h) = (target_w.max(1), target_h.max(1));
    let mut qualities: Vec<u8> = Vec::new();
    for q in [limits.jpeg_quality, 85, 70, 55, 40] {
        if !qualities.contains(&q) {
            qualities.push(q);
        }
    }
    loop {
        let scaled = decoded.resize_exact(w, h, FilterType::Lanczos3);
        let png = encode_png(&scaled);
        let rgb = DynamicImage::ImageRgb8(scaled.to_rgb8());
        let first_jpeg = encode_jpeg(&rgb, qualities[0]);
        let mut candidates: Vec<(Vec<u8>, &str)> = Vec::new();
        match (png, first_jpeg) {
            (Some(png), Some(jpeg)) if jpeg.len() < png.len() => {
                candidates.push((jpeg, "image/jpeg"));
                candidates.push((png, "image/png"));
            }
            (png, jpeg) => {
                candidates.extend(png.map(|p| (p, "image/png")));
                candidates.extend(jpeg.map(|j| (j, "image/jpeg")));
            }
        }
        let fits = |data: &[u8]| data.len().div_ceil(3) * 4 < limits.max_bytes;
        let mut chosen = candidates.into_iter().find(|(data, _)| fits(data));
        if chosen.is_none() {
            chosen = qualities[1..]
                .iter()
                .filter_map(|q| encode_jpeg(&rgb, *q))
                .find(|data| fits(data))
                .map(|data| (data, "image/jpeg"));
        }
        if let Some((data, mime)) = chosen {
            return Ok(Processed {
                image: content(&data, mime),
                note: Some(dimension_note(width, height, w, h)),
            });
        }
        if w == 1 && h == 1 {
            return Err(OMITTED.to_string());
        }
        let next = |n: u32| {
            if n == 1 {
                1
            } else {
                ((f64::from(n) * 0.75).floor() as u32).max(1)
            }
        };
        (w, h) = (next(w), next(h));
    }
}

/// A prompt's (or a queued message's) images as pi 1.6.0 sends them: each made ready with
/// `prepare` (`limits` `None`: `images.autoResize` off); the notes (conversions, coordinate
/// mappings, or why an image was left out) follow the text after a blank line.
pub fn scale_prompt(
    text: &str,
    images: &[ImageContent],
    limits: Option<&ResizeLimits>,
) -> (String, Vec<ImageContent>) {
    let mut kept = Vec::with_capacity(images.len());
    let mut notes: Vec<String> = Vec::new();
    for image in images {
        match STANDARD.decode(image.data.as_bytes()) {
            Ok(bytes) => match prepare(&bytes, &image.mime_type, limits) {
                Ok(processed) => {
                    kept.push(processed.image);
                    notes.extend(processed.note);
                }
                Err(omitted) => notes.push(omitted),
            },
            // Not base64: pi 1.6.0 decodes leniently and then fails to read the image.
            Err(_) => notes.push(if inline_type(&base_mime(&image.mime_type)).is_some() {
                OMITTED.to_string()
            } else {
                NOT_CONVERTED.to_string()
            }),
        }
    }
    let text = if notes.is_empty() {
        text.to_string()
    } else {
        format!("{text}\n\n{}", notes.join("\n"))
    };
    (text, kept)
}

/// A tool result's images as pi 1.6.0 keeps them (extension and MCP tools hand back images of
/// any size): each made ready with `prepare`, its notes in a text block right after it; an image
/// that cannot be made ready stays as it came. `None` when nothing changed.
pub fn normalize_tool_result(
    content: &[ContentBlock],
    limits: Option<&ResizeLimits>,
) -> Option<Vec<ContentBlock>> {
    if !content.iter().any(|b| matches!(b, ContentBlock::Image(_))) {
        return None;
    }
    let mut out = Vec::with_capacity(content.len() + 1);
    let mut changed = false;
    for block in content {
        let ContentBlock::Image(image) = block else {
            out.push(block.clone());
            continue;
        };
        let processed = STANDARD
            .decode(image.data.as_bytes())
            .map_err(|_| OMITTED.to_string())
            .and_then(|bytes| prepare(&bytes, &image.mime_type, limits));
        match processed {
            Ok(processed) if processed.image != *image || processed.note.is_some() => {
                out.push(ContentBlock::Image(processed.image));
                if let Some(note) = processed.note {
                    out.push(ContentBlock::Text(TextContent::new(&note)));
                }
                changed = true;
            }
            _ => out.push(block.clone()),
        }
    }
    changed.then_some(out)
}

/// The note pi 1.6.0 puts beside a scaled image so the model can map coordinates back.
fn dimension_note(width: u32, height: u32, shown_w: u32, shown_h: u32) -> String {
    let scale = f64::from(width) / f64::from(shown_w);
    format!(
        "[Image: original {width}x{height}, displayed at {shown_w}x{shown_h}. Multiply coordinates by {} to map to original image.]",
        to_fixed_2(scale)
    )
}

/// JavaScript's `Math.round` for the non-negative sizes here (halves round up).
fn js_round(value: f64) -> u32 {
    (value + 0.5).floor().max(0.0) as u32
}

/// JavaScript's `x.toFixed(2)` for a positive `x`: the nearest hundredth of the exact value, a
/// tie going up (Rust's formatting breaks ties to even).
fn to_fixed_2(x: f64) -> String {
    let exact = format!("{x:.60}");
    let tie = exact.split_once('.').is_some_and(|(_, fraction)| {
        fraction.len() > 2
            && fraction[2..].starts_with('5')
            && fraction[3..].bytes().all(|b| b == b'0')
    });
    if tie {
        let hundredths = (x * 100.0).floor() as u64 + 1;
        return format!("{}.{:02}", hundredths / 100, hundredths % 100);
    }
    format!("{x:.2}")
}

/// The image, turned upright by its EXIF orientation as pi's does; None when it does not decode.
fn decode(bytes: &[u8]) -> Option<DynamicImage> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .ok()?;
    let mut decoder = reader.into_decoder().ok()?;
    let orientation = decoder.orientation().ok();
    let mut image = DynamicImage::from_decoder(decoder).ok()?;
    if let Some(orientation) = orientation {
        image.apply_orientation(orientation);
    }
    Some(image)
}

fn encode_png(image: &DynamicImage) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let rgba = DynamicImage::ImageRgba8(image.to_rgba8());
    rgba.write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
        .ok()?;
    Some(out)
}

fn encode_jpeg(rgb: &DynamicImage, quality: u8) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality.max(1));
    rgb.write_with_encoder(encoder).ok()?;
    Some(out)
}

/// How many leading bytes [`sniff_mime`] needs to decide (an APNG's `acTL` can sit that far in).
pub const SNIFF_BYTES: usize = 4100;

/// Supported image type of a file's first bytes (jpeg, png — not animated png —, gif, webp,
/// and bmp, which `prepare` converts).
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
    if head.starts_with(b"BM") && is_bmp(head) {
        return Some("image/bmp");
    }
    None
}

/// pi 1.6.0's BMP check: a plausible file header and a core or info DIB header with one plane
/// and a bit depth BMP has.
fn is_bmp(head: &[u8]) -> bool {
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let u32_at =
        |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    if head.len() < 26 {
        return false;
    }
    let (file_size, pixels_at, dib_size) = (u32_at(2), u32_at(10), u32_at(14));
    if file_size != 0 && file_size < 26 {
        return false;
    }
    if u64::from(pixels_at) < 14 + u64::from(dib_size) {
        return false;
    }
    if file_size != 0 && pixels_at >= file_size {
        return false;
    }
    let (planes, bits) = match dib_size {
        12 => (u16_at(22), u16_at(24)),
        40..=124 if head.len() >= 30 => (u16_at(26), u16_at(28)),
        _ => return false,
    };
    planes == 1 && [1, 4, 8, 16, 24, 32].contains(&bits)
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

    fn png(width: u32, height: u32) -> Vec<u8> {
        let pixels = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x ^ y) % 256) as u8])
        });
        let mut out = Vec::new();
        DynamicImage::ImageRgb8(pixels)
            .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn small_images_pass_unchanged_and_large_ones_are_scaled_with_a_note() {
        let small = png(40, 30);
        let out = process(&small, "image/png", &ResizeLimits::default()).unwrap();
        assert_eq!(out.image, content(&small, "image/png"));
        assert_eq!(out.note, None);

        let limits = ResizeLimits {
            max_width: 50,
            max_height: 50,
            ..ResizeLimits::default()
        };
        let out = process(&png(120, 60), "image/png", &limits).unwrap();
        assert_eq!(
            out.note.as_deref(),
            Some(
                "[Image: original 120x60, displayed at 50x25. Multiply coordinates by 2.40 to map to original image.]"
            )
        );
        let bytes = STANDARD.decode(&out.image.data).unwrap();
        let scaled = decode(&bytes).unwrap();
        assert_eq!((scaled.width(), scaled.height()), (50, 25));

        // Too many bytes for the limit: smaller by quarters until it fits.
        let tight = ResizeLimits {
            max_bytes: 2000,
            ..ResizeLimits::default()
        };
        let out = process(&png(300, 300), "image/png", &tight).unwrap();
        assert!(out.image.data.len() < 2000);
        assert!(
            out.note
                .unwrap()
                .starts_with("[Image: original 300x300, displayed at ")
        );
        assert_eq!(
            process(b"\x89PNG\r\n\x1a\nbroken", "image/png", &limits),
            Err(OMITTED.to_string())
        );
    }

    #[test]
    fn limits_come_from_input_limits_and_to_fixed_rounds_ties_up() {
        let limits = ResizeLimits::from_input_limits(Some(&serde_json::json!(
            {"images": {"resize": {"maxWidth": 640, "maxBytes": "lots"}}}
        )));
        assert_eq!(limits.max_width, 640);
        assert_eq!(limits.max_height, 2000);
        assert_eq!(limits.max_bytes, 4_718_592);
        assert_eq!(to_fixed_2(1.125), "1.13");
        assert_eq!(to_fixed_2(2.4), "2.40");
        assert_eq!(to_fixed_2(1.0 / 3.0), "0.33");
        assert_eq!(js_round(12.5), 13);
    }

    #[test]
    fn bmp_is_converted_to_png_with_pis_hint() {
        let mut bmp = Vec::new();
        DynamicImage::ImageRgb8(image::RgbImage::new(4, 3))
            .write_to(&mut Cursor::new(&mut bmp), image::ImageFormat::Bmp)
            .unwrap();
        assert_eq!(sniff_mime(&bmp), Some("image/bmp"));
        assert_eq!(sniff_mime(&bmp[..20]), None, "too short for a BMP header");
        let out = prepare(&bmp, "image/bmp", Some(&ResizeLimits::default())).unwrap();
        assert_eq!(out.image.mime_type, "image/png");
        assert_eq!(
            out.note.as_deref(),
            Some("[Image converted from image/bmp to image/png.]")
        );
        let unscaled = prepare(&bmp, "image/bmp", None).unwrap();
        assert_eq!(unscaled, out);
        assert_eq!(
            prepare(b"BM-not-really", "image/bmp", None),
            Err(NOT_CONVERTED.to_string())
        );
    }

    #[test]
    fn image_types_are_sniffed_by_their_magic_bytes() {
        assert_eq!(sniff_mime(b"GIF89a"), Some("image/gif"));
        assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_mime(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(sniff_mime(b"hello"), None);
    }
}
