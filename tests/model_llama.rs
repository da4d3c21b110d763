//! The llama family: a tiny random model built in memory (CPU against GPU, cached
//! against recomputed generation, malformed GGUF files), and SmolLM2-135M-Instruct from
//! the fetched GGUF against the float64 numpy reference in
//! tests/fixtures/models/llama/ (generate.py).
//!
//! The real-model tests are ignored by default; after scripts/fetch-models.sh run
//! `cargo test --release --test model_llama -- --ignored`.

mod common;

#[path = "model_llama/gguf_writer.rs"]
mod gguf_writer;
#[path = "model_llama/real.rs"]
mod real;
#[path = "model_llama/tiny.rs"]
mod tiny;
#[path = "model_llama/tiny_model.rs"]
mod tiny_model;
