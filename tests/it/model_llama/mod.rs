//! The llama family: a tiny random model built in memory (CPU against GPU, cached
//! against recomputed generation, malformed GGUF files), and SmolLM2-135M-Instruct from
//! the fetched GGUF against the float64 numpy reference in
//! tests/fixtures/models/llama/ (generate.py).
//!
//! The real-model tests are ignored by default; after scripts/fetch-models.sh run
//! `cargo test --release --test it -- --ignored model_llama::real::`.

mod chat;
pub mod gguf_writer;
mod quant_gpu;
mod quants;
mod real;
pub mod tiny;
pub mod tiny_model;
mod tiny_quant;
