//! The model's own `tokenizer.json` through the `tokenizers` crate, with the padding and
//! truncation that sentence-transformers configures switched off: a text becomes exactly
//! its tokens, `[CLS]` and `[SEP]` included, and too long a text is an error rather than
//! silently cut.

use tokenizers::Tokenizer;

use crate::model::{ModelError, Token};

pub(crate) struct BertTokenizer {
    inner: Tokenizer,
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
        Ok(Self { inner })
    }

    /// The tokens of `text`, special tokens included.
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
        Ok(enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .map(|(&id, t)| Token {
                id,
                text: t.clone(),
            })
            .collect())
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
