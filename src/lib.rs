//! # wgpu-attention
//!
//! Transformer attention on any GPU through wgpu (Vulkan, Metal, DX12, WebGPU), checked
//! against a plain CPU reference.
//!
//! ## The contract
//!
//! For batch `b`, query head `h`, query row `i`, key `j`, with `g(h) = h / (Hq / Hkv)`:
//!
//! ```text
//! logit[i, j]   = scale * dot(q[b,h,i,:], k[b,g(h),j,:]) + bias[b,h,i,j]
//! allowed[i, j] = mask[b,h,i,j] and causal(i, j) and window(i, j) and j < kv_len[b]
//! weights[i, :] = softmax over the allowed j of logit[i, :]   (0 where not allowed)
//! out[i, :]     = sum_j weights[i, j] * v[b,g(h),j,:]
//! ```
//!
//! - q `(B, Hq, Lq, D)`, k `(B, Hkv, Lk, D)`, v `(B, Hkv, Lk, Dv)`, out `(B, Hq, Lq, Dv)`,
//!   weights `(B, Hq, Lq, Lk)`, lse `(B, Hq, Lq)`; all row-major f32.
//! - `scale` defaults to `1/sqrt(D)`. Query position `p(i)` is `i` (top-left, the default)
//!   or `i + Lk - Lq` (bottom-right); causal allows `j <= p(i)`, a window `(left, right)`
//!   allows `p(i) - left <= j <= p(i) + right`.
//! - Masks are boolean (`true` = may attend) or additive (`-inf` allowed), any shape that
//!   broadcasts to `(B, Hq, Lq, Lk)`, rank 2 to 4. An additive `-inf` masks the pair
//!   exactly as a boolean `false` does, whatever q and k hold there; `+inf` and NaN in an
//!   additive mask are refused.
//! - A row with no allowed key gives out = 0, weights = 0, lse = -inf: never NaN from
//!   masking alone. NaN or inf in q, k or v propagates to the rows it touches; a key
//!   whose weight is exactly 0 contributes nothing to `out`.
//! - Every bad input is an [`AttentionError`] naming the argument and the shapes; no
//!   call panics.
//!
//! ## Use
//!
//! [`attention`] (blocking, native) and [`attention_async`] take ndarray views and return
//! arrays; [`attention_gpu_async`] keeps [`GpuTensor`]s on the device. [`attention_cpu`]
//! is the fast CPU path (f32 flash attention on rayon's threads, for machines and
//! browsers without an adapter); [`attention_reference`] is the float64 reference every
//! path, that one included, is tested against. A [`GpuContext`] comes from the best adapter ([`GpuContext::new`])
//! or from an application's own device ([`GpuContext::from_device`]). To record attention
//! into the application's own command encoder, between its own passes and on its own
//! buffers, prepare it once with [`PreparedAttention::new`] and call
//! [`PreparedAttention::record`] with [`AttentionBuffers`] (`examples/own_encoder.rs`).
//!
//! Multi-head attention with projections and a KV cache, as PyTorch's
//! `nn.MultiheadAttention`: [`mha`](fn@mha), [`mha_async`], [`mha_cpu`] and [`KvCache`], with
//! weights from a `.safetensors` state dict ([`MhaWeights::from_safetensors`]).

mod api;
#[cfg(not(target_arch = "wasm32"))]
pub mod bench;
mod checked_call;
mod cpu;
mod error;
mod gpu;
mod host_memory;
mod kernel_table;
mod mha;
pub mod model;
mod options;
mod output;
mod patterns;
mod prepared;
mod problem;
mod reference;
pub mod viz;

#[cfg(not(target_arch = "wasm32"))]
pub use api::attention;
pub use api::{
    attention_async, attention_gpu_async, attention_gpu_into_async, kernel_path, GpuOutputs,
};
pub use cpu::attention_cpu;
pub use error::{AttentionError, Result};
pub use gpu::device::context::{enumerate_adapters, GpuContext};
pub use gpu::device::tensor::GpuTensor;
#[doc(hidden)]
pub use gpu::hooks::{
    force_subgroup_decode_for_tests, fused_kernel_taken, fused_key_budget,
    invalid_dispatch_for_tests, staged_plan_for_tests, LinearForTests, LinearLayout, LinearTile,
};
#[doc(hidden)]
pub use gpu::kernels::pipelines::kernels_built;
#[doc(hidden)]
pub use kernel_table::{kernel_names, shader_sources};
#[cfg(not(target_arch = "wasm32"))]
pub use mha::{mha, mha_incremental};
pub use mha::{
    mha_async, mha_cpu, mha_gpu_into_async, mha_incremental_async, mha_step_into_async,
    HeadWeights, KvCache, MhaDims, MhaGpuOutputs, MhaGpuWeights, MhaOptions, MhaOutput, MhaWeights,
    Projections,
};
pub use options::{Alignment, AttentionOptions, FusedKernel, KernelPath, Mask, Precision, Window};
pub use output::AttentionOutput;
#[cfg(not(target_arch = "wasm32"))]
pub use patterns::gpu::attention_patterns;
pub use patterns::gpu::attention_patterns_async;
#[doc(hidden)]
pub use patterns::gpu::attention_patterns_sliced_for_tests;
pub use patterns::output::{AttentionPatterns, PooledWeights};
pub use patterns::reference::patterns_reference;
pub use patterns::request::{PatternOptions, MAX_POOL};
pub use prepared::{AttentionBuffers, PreparedAttention};
#[doc(hidden)]
pub use problem::validate_calls_for_tests;
pub use problem::{validate, MaskKind, MaskLayout, Problem, MAX_SEQ_LEN};
pub use reference::attention_reference;

/// The README's examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
