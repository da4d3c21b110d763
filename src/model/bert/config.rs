//! `config.json` of a Hugging Face BERT directory: the sizes the weights must have.

use serde::Deserialize;

use crate::model::ModelError;

/// The fields of a BERT `config.json` this crate reads; others are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}
fn default_position_type() -> String {
    "absolute".into()
}

/// Sizes above this are rejected before anything is allocated: no real BERT comes near,
/// and a hostile config could otherwise ask for terabytes.
const MAX_SIZE: usize = 1 << 20;

impl BertConfig {
    /// Parses and checks `config.json`.
    ///
    /// # Errors
    /// [`ModelError::Format`] for malformed JSON or inconsistent sizes,
    /// [`ModelError::Unsupported`] for an activation or position scheme this crate does
    /// not run.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let config: Self = serde_json::from_str(text)
            .map_err(|e| ModelError::format("config.json", e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Checks sizes and options; [`BertConfig::from_json`] calls it.
    ///
    /// # Errors
    /// As [`BertConfig::from_json`].
    pub fn check(&self) -> Result<(), ModelError> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ];
        for (name, n) in sizes {
            if n == 0 || n > MAX_SIZE {
                return Err(ModelError::format(
                    "config.json",
                    format!("{name} = {n} is outside 1..={MAX_SIZE}"),
                ));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ModelError::format(
                "config.json",
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    self.hidden_size, self.num_attention_heads
                ),
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(ModelError::format(
                "config.json",
                format!(
                    "layer_norm_eps = {} is not a positive number",
                    self.layer_norm_eps
                ),
            ));
        }
        // "gelu" in Hugging Face's BERT is the exact erf form.
        if self.hidden_act != "gelu" {
            return Err(ModelError::Unsupported(format!(
                "config.json: hidden_act {:?} (only \"gelu\", the erf form)",
                self.hidden_act
            )));
        }
        if self.position_embedding_type != "absolute" {
            return Err(ModelError::Unsupported(format!(
                "config.json: position_embedding_type {:?} (only \"absolute\")",
                self.position_embedding_type
            )));
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
