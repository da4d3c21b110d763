//! The integration tests: one binary, one module per concern, helpers shared by all.
//! `common` (inputs, tolerances, contexts), `paths` (running one kernel path) and
//! `cli_common` (running the binary) are the helpers, and `bert_tiny` (a tiny random BERT
//! built in memory) for the model tests; every other module is tests.

mod architecture;
mod bert_tiny;
mod big_q;
mod cli;
mod cli_bench;
mod cli_common;
mod cli_heatmap;
mod cli_malformed;
mod cli_mha;
mod cli_model;
mod cli_output_targets;
mod cli_outputs;
mod cli_random_args;
mod common;
mod concurrency;
mod context;
mod cpu_fast;
mod decode;
mod decode_subgroup;
mod determinism;
mod device_faults;
mod errors;
mod f16;
mod fixtures_jax;
// Before its users: forced_kernel_tests! is textually scoped.
#[macro_use]
mod forced_kernel;
mod fused;
mod fused_lanes;
mod fused_rows;
mod fused_tiled;
mod matmul;
mod memory;
mod mha;
mod model_bert;
mod model_bert_embed;
mod model_bert_real;
mod model_llama;
mod model_patterns;
mod npy_fuzz;
mod numerics;
mod own_encoder;
mod paths;
mod patterns;
mod properties;
mod rejected;
mod shaders;
mod special_files;
mod special_inputs;
mod splitting;
mod staged;
mod tokens;
