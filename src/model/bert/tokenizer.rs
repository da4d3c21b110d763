//! The model's own `tokenizer.json` through the `tokenizers` crate, with the padding and
//! truncation that sentence-transformers configures switched off: a text becomes exactly
//! its tokens, `[CLS]` and `[SEP]` included, and too long a text is an error rather than
//! silently cut.

use std::collections::HashSet;

use tokenizers::Tokenizer;

use crate::model::tokens::{finish, Piece};
use crate::model::{ModelError, Token};

pub(crate) struct BertTokenizer {
    inner: Tokenizer,
    /// Ids of the added tokens marked special (`[CLS]`, `[SEP]`, `[PAD]`, ...), also when
    /// written in the text.
    special: HashSet<u32>,
    /// WordPiece's mark of a piece that continues a word; `None` for other models.
    continuing: Option<&'static str>,
}

impl BertTokenizer {
    /// Parses `tokenizer.json`.
    ///
    /// # Errors
    /// [`ModelError::Format`] when the JSON is not a tokenizer the crate can build.
    pub(crate) fn from_json(bytes: &[u8]) -> Result<Self, ModelError> {
        let mut inner = Tokenizer::from_bytes(bytes)
            .map_err(|e| ModelError::format("tokenizer.json", e.to_string()))?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| ModelError::format("tokenizer.json", e.to_string()))?;
        let special = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        let continuing =
            matches!(inner.get_model(), tokenizers::ModelWrapper::WordPiece(_)).then_some("##");
        Ok(Self {
            inner,
            special,
            continuing,
        })
    }

    /// The tokens of `text`, special tokens included, labelled (see [`Token`]) from the
    /// text they cover: the tokenizer's offsets index the text as given, before
    /// lowercasing and the decomposition of Hangul into jamo.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` for an empty (or all-whitespace) text or one
    /// the tokenizer rejects.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<Token>, ModelError> {
        if text.trim().is_empty() {
            return Err(ModelError::input("--text", "the text is empty"));
        }
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| ModelError::input("--text", format!("cannot tokenize: {e}")))?;
        let mask = enc.get_special_tokens_mask();
        let pieces = enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .zip(enc.get_offsets())
            .enumerate()
            .map(|(i, ((&id, raw), &(start, end)))| {
                // Added by the template, or written whole in the text; an `[UNK]` stands
                // for the word it replaced and is labelled with it.
                let special = mask.get(i).is_some_and(|&m| m != 0)
                    || (self.special.contains(&id) && text.get(start..end) == Some(raw));
                let piece = self
                    .continuing
                    .and_then(|c| raw.strip_prefix(c))
                    .filter(|_| !special);
                Piece {
                    id,
                    raw: raw.clone(),
                    bytes: piece.unwrap_or(raw).as_bytes().to_vec(),
                    span: (!special && start < end && end <= text.len()).then_some(start..end),
                    special,
                    continues: piece.is_some(),
                }
            })
            .collect();
        Ok(finish(text, pieces))
    }

    /// The text of `ids`, special tokens kept.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `ids` when the tokenizer cannot decode them.
    pub(crate) fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::input("ids", format!("cannot decode: {e}")))
    }

    /// The vocabulary size, special tokens included.
    pub(crate) fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The tokenizer model's kind, e.g. `WordPiece`.
    pub(crate) fn kind(&self) -> &'static str {
        match self.inner.get_model() {
            tokenizers::ModelWrapper::WordPiece(_) => "WordPiece",
            tokenizers::ModelWrapper::BPE(_) => "BPE",
            tokenizers::ModelWrapper::Unigram(_) => "Unigram",
            tokenizers::ModelWrapper::WordLevel(_) => "WordLevel",
        }
    }
}
