//! Values shared by both model families.

use ndarray::{Array1, Array2, Array4};

/// What `model info` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `bert` or `llama`.
    pub architecture: String,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub hidden: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// The longest token sequence the model takes.
    pub max_positions: usize,
    pub causal: bool,
    /// A one-line description of the tokenizer.
    pub tokenizer: String,
    /// Every file read, with its sha256 in hex.
    pub files: Vec<(String, String)>,
}

/// The result of one forward pass over a token sequence of length L.
#[derive(Debug, Clone)]
pub struct ForwardOutput {
    /// `(layers, heads, L, L)` softmax probabilities, when asked for.
    pub attention: Option<Array4<f32>>,
    /// `(L, hidden)`: the encoder's last hidden state, or the decoder's after its final norm.
    pub hidden: Array2<f32>,
    /// `(vocab,)` logits at the last position (causal models only).
    pub logits: Option<Array1<f32>>,
}

/// One layer's attention inputs as its attention call reads them, for one sequence: `q`
/// `(1, heads, L, D)` after the projection (and RoPE), `k` and `v` `(1, kv_heads, L, D)`.
/// With [`ModelInfo::causal`] and the default scale `1/√D`, they give back the layer's
/// attention exactly (for example through [`crate::attention_patterns`]).
#[derive(Debug, Clone)]
pub struct LayerInputs {
    pub q: Array4<f32>,
    pub k: Array4<f32>,
    pub v: Array4<f32>,
}

/// One head's attention output replaced, to see what the rest of the model does with a
/// changed head: at `layer`, query head `head`'s output rows (its weights times V, before
/// the output projection mixes the heads) become `out`, `(L, head_dim)`; every later layer
/// runs on as usual.
#[derive(Debug, Clone)]
pub struct HeadPatch {
    pub layer: usize,
    pub head: usize,
    pub out: Array2<f32>,
}

impl HeadPatch {
    /// Checks the patch against a model of `layers` × `heads` heads of `dim` and a
    /// sequence of `len` tokens.
    pub(crate) fn check(
        &self,
        (layers, heads, dim): (usize, usize, usize),
        len: usize,
    ) -> Result<(), crate::model::ModelError> {
        use crate::model::ModelError;
        if self.layer >= layers {
            return Err(ModelError::input(
                "patch",
                format!("layer {} is not below the model's {layers}", self.layer),
            ));
        }
        if self.head >= heads {
            return Err(ModelError::input(
                "patch",
                format!("head {} is not below the model's {heads}", self.head),
            ));
        }
        if self.out.dim() != (len, dim) {
            return Err(ModelError::input(
                "patch",
                format!(
                    "out is {:?}; a head's output for {len} tokens is ({len}, {dim})",
                    self.out.shape()
                ),
            ));
        }
        if let Some(x) = self.out.iter().find(|x| !x.is_finite()) {
            return Err(ModelError::input("patch", format!("out holds {x}")));
        }
        Ok(())
    }

    /// Writes the patch into packed context rows `(L, heads·dim)` (the CPU passes' layout).
    pub(crate) fn apply_rows<T: Copy>(&self, rows: &mut [T], heads: usize, of: impl Fn(f32) -> T) {
        let dim = self.out.ncols();
        for (t, row) in self.out.outer_iter().enumerate() {
            let at = t * heads * dim + self.head * dim;
            for (dst, &x) in rows[at..at + dim].iter_mut().zip(row) {
                *dst = of(x);
            }
        }
    }
}

/// How the next token is picked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token (ties go to the lowest id).
    Greedy,
    /// Softmax at `temperature` over the `top_k` most likely tokens (0 = all), drawn with
    /// a seeded generator so a seed always gives the same tokens.
    Sample {
        temperature: f32,
        top_k: usize,
        seed: u64,
    },
}

/// Options of a generation run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Keep keys and values in a cache so each new token costs one step (the default);
    /// `false` recomputes the whole sequence for every token.
    pub use_cache: bool,
    /// Stop at the model's end-of-sequence token.
    pub stop_at_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 32,
            sampling: Sampling::Greedy,
            use_cache: true,
            stop_at_eos: true,
        }
    }
}

/// Timing of a generation run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub generated: Vec<u32>,
    /// Seconds spent on the prompt (up to the first new token's logits).
    pub prompt_seconds: f64,
    /// Seconds spent producing the new tokens after the first.
    pub generate_seconds: f64,
}
