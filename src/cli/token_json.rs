//! The token list `model attention --tokens-out` writes and `heatmap --tokens` reads: a
//! JSON list with one object per token,
//!
//! ```json
//! {"id": 2606, "raw": "Ġlove", "text": "␣love", "bytes": [32, 108, 111, 118, 101],
//!  "span": [1, 6], "special": false, "word": 1, "word_text": "love"}
//! ```
//!
//! `raw` is the vocabulary's spelling, `text` the label figures show, `span` the byte range
//! of the input text (null for a token the tokenizer added), `word` the index of the word
//! it belongs to and `word_text` that word's label. `heatmap --tokens` also takes a plain
//! list of strings (labels as given, no words).

use std::ops::Range;

use serde_json::{json, Value};
use wgpu_attention::model::{words, Token, Word};

/// Token labels for the axes, with the words they make up when known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenLabels {
    pub labels: Vec<String>,
    /// (label, token range) of each word, tiling the tokens.
    pub words: Option<Vec<(String, Range<usize>)>>,
}

impl TokenLabels {
    /// The labels and words of a model's `tokens` of `text`.
    pub fn of_tokens(text: &str, tokens: &[Token]) -> Self {
        Self {
            labels: tokens.iter().map(|t| t.text.clone()).collect(),
            words: Some(
                words(text, tokens)
                    .into_iter()
                    .map(|w| (w.text, w.tokens))
                    .collect(),
            ),
        }
    }

    /// Labels without words (`--labels a,b,c`, a list of strings).
    pub fn plain(labels: Vec<String>) -> Self {
        Self {
            labels,
            words: None,
        }
    }
}

/// The JSON of `tokens` of `text` (see the module docs).
pub fn to_json(text: &str, tokens: &[Token]) -> Vec<u8> {
    let words: Vec<Word> = words(text, tokens);
    let word_text = |k: usize| {
        words
            .iter()
            .find(|w| w.tokens.contains(&k))
            .map_or(String::new(), |w| w.text.clone())
    };
    let list: Vec<Value> = tokens
        .iter()
        .enumerate()
        .map(|(k, t)| {
            json!({
                "id": t.id,
                "raw": t.raw,
                "text": t.text,
                "bytes": t.bytes,
                "span": t.span.as_ref().map(|s| [s.start, s.end]),
                "special": t.special,
                "word": t.word,
                "word_text": word_text(k),
            })
        })
        .collect();
    // A list of plain values cannot fail to encode.
    serde_json::to_vec(&list).unwrap_or_default()
}

/// Parses a token list: one object per token (see the module docs) or one string per
/// token. The error says what is wrong and where.
pub fn parse(text: &str) -> Result<TokenLabels, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(items) = value else {
        return Err("not a JSON list".into());
    };
    if items.iter().all(Value::is_string) {
        return Ok(TokenLabels::plain(
            items
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect(),
        ));
    }
    let mut labels = Vec::with_capacity(items.len());
    let mut words: Vec<(String, Range<usize>)> = Vec::new();
    let mut have_words = true;
    let mut last: Option<u64> = None;
    for (k, item) in items.iter().enumerate() {
        let label = item.get("text").and_then(Value::as_str).ok_or_else(|| {
            format!("token {k} is neither a string nor an object with a \"text\" string")
        })?;
        labels.push(label.to_string());
        let Some(word) = item.get("word").and_then(Value::as_u64) else {
            have_words = false;
            continue;
        };
        let word_text = item
            .get("word_text")
            .and_then(Value::as_str)
            .unwrap_or(label);
        match last {
            Some(w) if word == w => {
                if let Some((_, r)) = words.last_mut() {
                    r.end = k + 1;
                }
            }
            Some(w) if word == w + 1 => words.push((word_text.to_string(), k..k + 1)),
            None if word == 0 => words.push((word_text.to_string(), k..k + 1)),
            _ => {
                return Err(format!(
                    "token {k} has word {word} after word {}: words must count up from 0 in order",
                    last.map_or("(none)".to_string(), |w| w.to_string())
                ))
            }
        }
        last = Some(word);
    }
    Ok(TokenLabels {
        labels,
        words: (have_words && !words.is_empty()).then_some(words),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_strings_both_parse_and_words_must_count_up() {
        let plain = parse(r#"["a", "b"]"#).unwrap();
        assert_eq!(plain.labels, ["a", "b"]);
        assert_eq!(plain.words, None);
        let objects = parse(
            r#"[{"text": "I", "word": 0, "word_text": "I"},
                {"text": "␣lo", "word": 1, "word_text": "love"},
                {"text": "ve", "word": 1, "word_text": "love"}]"#,
        )
        .unwrap();
        assert_eq!(objects.labels, ["I", "␣lo", "ve"]);
        assert_eq!(
            objects.words,
            Some(vec![("I".into(), 0..1), ("love".into(), 1..3)])
        );
        assert!(parse(r#"[{"text": "a", "word": 1}]"#).is_err());
        assert!(parse(r#"[{"text": "a", "word": 0}, {"text": "b", "word": 2}]"#).is_err());
        assert!(parse(r#"[{"raw": "a"}]"#).is_err());
        assert!(parse(r#"{"text": "a"}"#).is_err());
    }
}
