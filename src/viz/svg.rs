//! Small helpers for writing SVG by hand: escaping and text width estimates.

/// Text as XML character data or an attribute value.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// An estimate of how wide `text` is at `font_size` px: wide (CJK, Hangul) characters
/// count a full em, others six tenths. Used only to leave room for labels.
pub(crate) fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars()
        .map(|c| if is_wide(c) { 1.0 } else { 0.62 })
        .sum::<f64>()
        * font_size
}

fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x115F | 0x2E80..=0xA4CF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 | 0x1F300..=0x1FAFF)
}

/// The font stack of every figure: DejaVu for Latin, then fonts that carry Hangul and CJK.
pub(crate) const FONT_FAMILY: &str =
    "DejaVu Sans, Noto Sans CJK KR, NanumGothic, Noto Sans KR, Malgun Gothic, sans-serif";
