//! Real pretrained models on the crate's kernels: a BERT encoder loaded from a Hugging Face
//! directory (all-MiniLM-L6-v2) and a llama-family causal decoder loaded from a GGUF file
//! (SmolLM2-135M-Instruct), each with a GPU forward pass built from WGSL kernels and the
//! crate's own attention paths, and a CPU forward pass with the same semantics in f32 (fast) and float64 (the reference).
//!
//! `scripts/fetch-models.sh` fetches both models into the cache directory that
//! [`resolve_model_path`] searches, so they may be named `minilm` and `smollm2`.

pub mod bert;
mod cpu_float;
mod error;
mod family;
mod files;
pub mod llama;
mod locate;
pub(crate) mod ops;
mod stages;
mod tokens;
mod types;

pub use error::ModelError;
pub use family::{Model, ModelGpu};
pub use files::{
    check_promised_len, open_regular_file, read_header_bytes, safetensors_len, sha256_hex,
};
pub use locate::{model_cache_dir, resolve_model_path};
#[doc(hidden)]
pub use ops::{
    force_pages_for_tests, force_split_products_for_tests, quant_embed_planes_probe,
    quant_embed_probe, quant_matmul_paged_probe, quant_matmul_planes_probe, quant_matmul_probe,
    QuantEntry,
};
pub use stages::StageTimes;
pub use tokens::{words, Token, Word, CONTINUATION_MARK, NEWLINE_MARK, SPACE_MARK, TAB_MARK};
pub use types::{
    ForwardOutput, GenerateOptions, GenerateStats, HeadPatch, LayerInputs, ModelInfo, Sampling,
};
