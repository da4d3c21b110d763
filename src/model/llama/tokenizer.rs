//! The byte-level BPE tokenizer a GGUF file describes in its `tokenizer.ggml.*` keys,
//! built with the `tokenizers` crate.
//!
//! `tokenizer.ggml.model = gpt2` is GPT-2's byte-level BPE: the vocabulary is
//! `tokenizer.ggml.tokens` (id = index), the merges are `tokenizer.ggml.merges` ("a b",
//! highest priority first), and tokens of type 3 (control) are special tokens matched
//! whole in the text. The pre-tokenizer follows `tokenizer.ggml.pre` as llama.cpp does:
//! `smollm` (and the GPT-2 family) splits with GPT-2's pattern, `smollm` first splitting
//! every digit on its own. BOS is prepended only when `tokenizer.ggml.add_bos_token` is
//! true.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, Tokenizer};

use crate::model::llama::gguf::{Gguf, Value};
use crate::model::tokens::{byte_level_bytes, finish, Piece};
use crate::model::{ModelError, Token};

/// The token type llama.cpp gives control tokens such as `<|im_start|>`.
const CONTROL: i64 = 3;

/// Everything the tokenizer is built from, as a GGUF file holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizerSpec {
    pub tokens: Vec<String>,
    /// Pairs "left right", highest priority first.
    pub merges: Vec<String>,
    /// One per token (1 = normal, 3 = control); empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.pre`: how text is split before BPE.
    pub pre: String,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
}

/// A built tokenizer.
#[derive(Clone)]
pub struct LlamaTokenizer {
    inner: Tokenizer,
    spec_summary: String,
    vocab: usize,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    add_bos: bool,
    /// Ids of the control tokens, which are matched whole in the text.
    control: std::collections::HashSet<u32>,
}

impl std::fmt::Debug for LlamaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spec_summary)
    }
}

fn format(detail: impl Into<String>) -> ModelError {
    ModelError::format("GGUF tokenizer", detail)
}

fn strings(g: &Gguf<'_>, key: &str) -> Result<Vec<String>, ModelError> {
    let items = g
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format(format!("{key} is missing or not an array")))?;
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format(format!("{key} holds a non-string")))
        })
        .collect()
}

fn id(g: &Gguf<'_>, key: &str) -> Option<u32> {
    g.get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
}

impl TokenizerSpec {
    /// Reads the tokenizer keys of `g`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for a tokenizer model other than `gpt2`;
    /// [`ModelError::Format`] for missing or mistyped keys.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self, ModelError> {
        let model = g
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or_else(|| format("tokenizer.ggml.model is missing"))?;
        if model != "gpt2" {
            return Err(ModelError::Unsupported(format!(
                "tokenizer.ggml.model = {model}; this crate reads gpt2 (byte-level BPE)"
            )));
        }
        let token_types = match g.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| format("tokenizer.ggml.token_type is not an array"))?
                .iter()
                .map(|t| match t {
                    Value::I32(t) => Ok(*t),
                    _ => Err(format("tokenizer.ggml.token_type holds a non-i32")),
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            tokens: strings(g, "tokenizer.ggml.tokens")?,
            merges: strings(g, "tokenizer.ggml.merges")?,
            token_types,
            pre: g
                .get("tokenizer.ggml.pre")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string(),
            bos: id(g, "tokenizer.ggml.bos_token_id"),
            eos: id(g, "tokenizer.ggml.eos_token_id"),
            add_bos: g
                .get("tokenizer.ggml.add_bos_token")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

impl LlamaTokenizer {
    /// Builds the tokenizer.
    ///
    /// # Errors
    /// [`ModelError::Format`] for a malformed merge, a token type list of the wrong
    /// length, a duplicate token or a BOS/EOS id outside the vocabulary;
    /// [`ModelError::Unsupported`] for a pre-tokenizer this crate does not know.
    pub fn new(spec: &TokenizerSpec) -> Result<Self, ModelError> {
        let n = spec.tokens.len();
        if !spec.token_types.is_empty() && spec.token_types.len() != n {
            return Err(format(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }
        for (what, id) in [("bos", spec.bos), ("eos", spec.eos)] {
            if id.is_some_and(|i| i as usize >= n) {
                return Err(format(format!(
                    "{what} id {id:?} outside a vocabulary of {n}"
                )));
            }
        }
        let vocab: Vocab = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        if vocab.len() != n {
            return Err(format("the vocabulary holds a token twice"));
        }
        let merges = spec
            .merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| format(format!("merge {m:?} is not two tokens")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| format(format!("building the BPE model: {e}")))?;
        let byte_level = ByteLevel::new(false, true, true);
        let pre: PreTokenizerWrapper = match spec.pre.as_str() {
            // llama.cpp: "\p{N}" first, then GPT-2's pattern.
            "smollm" | "starcoder" | "refact" | "codeshell" => Sequence::new(vec![
                Digits::new(true).into(),
                byte_level.into(),
            ])
            .into(),
            "gpt-2" | "gpt2" | "default" => byte_level.into(),
            other => {
                return Err(ModelError::Unsupported(format!(
                    "tokenizer.ggml.pre = {other}; this crate splits text for smollm, starcoder and gpt-2"
                )))
            }
        };
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = spec
            .token_types
            .iter()
            .zip(&spec.tokens)
            .filter(|(t, _)| i64::from(**t) == CONTROL)
            .map(|(_, tok)| AddedToken::from(tok.clone(), true))
            .collect();
        inner.add_special_tokens(&special);
        let control = spec
            .token_types
            .iter()
            .enumerate()
            .filter(|(_, t)| i64::from(**t) == CONTROL)
            .map(|(i, _)| i as u32)
            .collect();
        Ok(Self {
            inner,
            spec_summary: format!(
                "byte-level BPE ({n} tokens, {} merges, pre-tokenizer {}, {} special tokens{})",
                spec.merges.len(),
                spec.pre,
                special.len(),
                if spec.add_bos { ", BOS added" } else { "" }
            ),
            vocab: n,
            bos: spec.bos,
            eos: spec.eos,
            add_bos: spec.add_bos,
            control,
        })
    }

    /// The control tokens (matched whole in text), as (id, text), lowest id first.
    pub(crate) fn control_tokens(&self) -> Vec<(u32, String)> {
        let mut out: Vec<(u32, String)> = self
            .inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| (id, t.content))
            .collect();
        out.sort();
        out
    }

    /// The one-line description `model info` prints.
    pub fn describe(&self) -> &str {
        &self.spec_summary
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The tokens of `text`, with BOS first when the model adds it, labelled (see
    /// [`Token`]) from their decoded bytes. Special tokens written in the text
    /// (`<|im_start|>`) become their ids.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` when the tokenizer fails.
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, ModelError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::input("--text", format!("tokenizing: {e}")))?;
        let mut pieces = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(bos)) = (self.add_bos, self.bos) {
            let raw = self.inner.id_to_token(bos).unwrap_or_default();
            pieces.push(Piece {
                id: bos,
                bytes: raw.as_bytes().to_vec(),
                raw,
                span: None,
                special: true,
                continues: false,
            });
        }
        // Byte-level BPE is lossless: the tokens' bytes, in order, are the text's bytes,
        // so each token's span is where the bytes before it end.
        let mut at = 0;
        for (&id, raw) in enc.get_ids().iter().zip(enc.get_tokens()) {
            let special = self.control.contains(&id);
            let bytes = match (special, byte_level_bytes(raw)) {
                (false, Some(b)) => b,
                _ => raw.as_bytes().to_vec(),
            };
            let span = at..at + bytes.len();
            at = span.end;
            pieces.push(Piece {
                id,
                raw: raw.clone(),
                bytes,
                span: Some(span),
                special,
                continues: false,
            });
        }
        if at == text.len() {
            return Ok(finish(text, pieces));
        }
        // Not the text after all (no tokenizer this crate builds gets here): label the
        // tokens from their own bytes instead.
        let own: Vec<u8> = pieces
            .iter()
            .filter(|p| p.span.is_some())
            .flat_map(|p| p.bytes.iter().copied())
            .collect();
        Ok(finish(&String::from_utf8_lossy(&own), pieces))
    }

    /// The text of `ids`, special tokens included.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `ids` for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= self.vocab) {
            return Err(ModelError::input(
                "ids",
                format!("id {bad} is outside the vocabulary of {}", self.vocab),
            ));
        }
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::input("ids", format!("decoding: {e}")))
    }
}
