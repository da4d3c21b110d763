//! Multi-head attention with projections, as PyTorch's `nn.MultiheadAttention`
//! (`batch_first=True`), on the GPU and on a CPU reference.
//!
//! ```text
//! q = x Wqᵀ + bq            (B, L, E)  split into H heads of width D = E / H
//! k = kv Wkᵀ + bk           (B, S, N·D) split into N heads (N = H unless grouped-query)
//! v = kv Wvᵀ + bv           (B, S, N·D)
//! head h = attention(q_h, k_g, v_g) with g = h / (H / N), scale 1/sqrt(D)
//! y = concat(heads) Woᵀ + bo (B, L, E)
//! ```
//!
//! Decisions where PyTorch and this library's contract differ or are silent:
//! - kv is x for self-attention. Keys and values come from one tensor (`kv`), so
//!   `k_proj_weight` and `v_proj_weight` must take the same input width Ekv.
//! - `kv_heads` N (grouped-query, not in PyTorch's module) divides H; the key and value
//!   projections then have N·E/H rows, and a packed `in_proj_weight` has E + 2·N·E/H.
//! - `key_padding_mask` `(B, S)` keeps PyTorch's polarity: `true` = padding, ignored.
//! - `causal` is top-left over `(L, S)`: query `i` sees keys `j <= i`.
//! - A query with no key left (all padded) gets zero weights and a zero attention
//!   output, so `y` is the output bias there: PyTorch gives NaN.
//! - Weights are `(B, L, S)` averaged over heads, or `(B, H, L, S)` per head.
//! - Biases absent from the weights are zero (PyTorch's `bias=False`);
//!   `add_bias_kv` and `add_zero_attn` are not supported.
//! - Incremental decoding ([`KvCache`], [`mha_step_into_async`]) feeds one token at a
//!   time and matches the full causal run; a full cache is an error naming `kv_cache`.
//!
//! The GPU path projects with a tiled WGSL linear kernel that writes heads in
//! `(B, H, L, D)` layout directly (and reads them back the same way for the output
//! projection), so no transpose pass runs; attention itself is
//! [`attention_gpu_into_async`](crate::attention_gpu_into_async). [`mha_cpu`] computes
//! every step in f64.
//!
//! ```
//! use ndarray::{Array1, Array2, Array3};
//! use wgpu_attention::{
//!     mha, mha_cpu, GpuContext, HeadWeights, MhaGpuWeights, MhaOptions, MhaWeights, Projections,
//! };
//!
//! let e = 6;
//! let m = |n, k, s: f32| Array2::from_shape_fn((n, k), |(i, j)| ((i * 7 + j * 3) % 5) as f32 * s - 0.2);
//! let w = MhaWeights::new(
//!     Projections {
//!         q_weight: m(e, e, 0.1), q_bias: None,
//!         k_weight: m(e, e, 0.2), k_bias: Some(Array1::ones(e)),
//!         v_weight: m(e, e, 0.3), v_bias: None,
//!         out_weight: m(e, e, 0.1), out_bias: None,
//!     },
//!     3,    // heads
//!     None, // kv_heads: as many as heads
//! )?;
//! let x = Array3::from_shape_fn((1, 4, e), |(_, i, j)| (i + j) as f32 * 0.1);
//! let opts = MhaOptions { causal: true, weights: HeadWeights::Averaged, ..Default::default() };
//! let ctx = GpuContext::new()?;
//! let gpu = mha(&ctx, &MhaGpuWeights::upload(&ctx, &w)?, x.view(), None, &opts)?;
//! let cpu = mha_cpu(&w, x.view(), None, &opts)?;
//! assert!(gpu.y.iter().zip(&cpu.y).all(|(a, b)| (a - b).abs() < 1e-4));
//! assert_eq!(gpu.weights.unwrap().shape(), [1, 4, 4]);
//! # Ok::<(), wgpu_attention::AttentionError>(())
//! ```

mod cache;
mod cpu;
mod device;
mod gpu;
mod load;
mod options;
mod output;
mod problem;
mod weights;

#[cfg(not(target_arch = "wasm32"))]
pub use cache::mha_incremental;
pub use cache::{mha_incremental_async, mha_step_into_async, KvCache};
pub use cpu::mha_cpu;
pub use device::MhaGpuWeights;
#[cfg(not(target_arch = "wasm32"))]
pub use gpu::mha;
pub use gpu::{mha_async, mha_gpu_into_async, MhaGpuOutputs};
pub use options::{HeadWeights, MhaOptions};
pub use output::MhaOutput;
pub use weights::{MhaDims, MhaWeights, Projections};
