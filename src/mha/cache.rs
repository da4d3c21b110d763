//! Incremental decoding: a KV cache of projected keys and values on the device, fed one
//! token at a time.
//!
//! The cache holds `(B, N, capacity, D)` keys and values. A step projects one new token
//! of x, writes its key and value at position `len` (the linear kernel writes straight
//! into the cache), and attends its query against the first `len + 1` cached keys
//! through per-batch key lengths, so the buffers never grow or move. A step is causal
//! by construction: token `t` sees tokens `0..=t`, which is the full causal run's row
//! `t`. A full cache refuses further steps with [`AttentionError::InvalidOption`]
//! naming `kv_cache`; [`KvCache::clear`] starts over.

use ndarray::{s, ArrayView3, Axis, Ix3, Ix4};

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::tensor::GpuTensor;
use crate::host_memory::try_zeros;
use crate::mha::device::{self, MhaGpuWeights};
use crate::mha::gpu::{attend_and_project, read_outputs, MhaGpuOutputs};
use crate::mha::options::{HeadWeights, MhaOptions};
use crate::mha::output::{average_heads, MhaOutput};
use crate::mha::problem::{allowed_keys, validate};
use crate::options::{AttentionOptions, Mask};

/// Projected keys and values of up to `capacity` tokens per batch, on the device.
#[derive(Debug)]
pub struct KvCache {
    k: GpuTensor,
    v: GpuTensor,
    batch: usize,
    capacity: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache for `batch` sequences of up to `capacity` tokens, shaped for `w`.
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming `capacity` or `batch` when zero;
    /// [`AttentionError::TooLarge`] or [`AttentionError::Device`] when the device cannot
    /// hold it.
    pub fn new(ctx: &GpuContext, w: &MhaGpuWeights, batch: usize, capacity: usize) -> Result<Self> {
        for (arg, n) in [("batch", batch), ("capacity", capacity)] {
            if n == 0 {
                return Err(AttentionError::option(arg, "must be positive"));
            }
        }
        let d = w.dims;
        let shape = [batch, d.kv_heads, capacity, d.head_dim];
        Ok(Self {
            k: GpuTensor::allocate(ctx, "kv_cache", &shape)?,
            v: GpuTensor::allocate(ctx, "kv_cache", &shape)?,
            batch,
            capacity,
            len: 0,
        })
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every token; the buffers are kept.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// One incremental step: x `(B, 1, E)` is the next token of each sequence. Writes y
/// `(B, 1, E)` and, when `opts.weights` asks, per-head weights `(B, H, 1, capacity)`
/// (zero past the cached tokens) into `outputs`. `opts.causal` is implied;
/// `opts.key_padding_mask` is `(B, W)` with `W` at least the tokens held after the step
/// (columns past them are ignored).
///
/// # Errors
/// [`AttentionError::InvalidOption`] naming `kv_cache` when the cache is full, or made
/// for another batch size; [`AttentionError::Shape`] naming `x`, `key_padding_mask`,
/// `y` or `weights`; [`AttentionError::Device`] when the device fails.
pub async fn mha_step_into_async(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    cache: &mut KvCache,
    x: &GpuTensor,
    opts: &MhaOptions<'_>,
    outputs: &MhaGpuOutputs,
) -> Result<()> {
    let d = w.dims;
    if d.kv_embed != d.embed {
        return Err(AttentionError::option(
            "kv_cache",
            "incremental steps are self-attention; these weights take a separate kv input",
        ));
    }
    let p = validate(d, x.shape(), None, &MhaOptions::default())?;
    if p.len_q != 1 {
        return Err(AttentionError::shape(
            "x",
            format!(
                "a step takes one token per batch, (B, 1, E); got {:?}",
                x.shape()
            ),
        ));
    }
    let (b, len, cap) = (cache.batch, cache.len, cache.capacity);
    if p.batch != b || cache.k.shape() != [b, d.kv_heads, cap, d.head_dim] {
        return Err(AttentionError::option(
            "kv_cache",
            format!(
                "made for shape {:?}; this step has batch {} and these weights (N, D) = ({}, {})",
                cache.k.shape(),
                p.batch,
                d.kv_heads,
                d.head_dim
            ),
        ));
    }
    if len >= cap {
        return Err(AttentionError::option(
            "kv_cache",
            format!("full: it holds its capacity of {cap} tokens; clear it or make a larger one"),
        ));
    }
    if let Some(m) = &opts.key_padding_mask {
        if m.nrows() != b || m.ncols() <= len {
            return Err(AttentionError::shape(
                "key_padding_mask",
                format!(
                    "expected (B, W) with B = {b} and W >= {} tokens, got {:?}",
                    len + 1,
                    m.shape()
                ),
            ));
        }
    }
    let want_weights = opts.weights != HeadWeights::None;
    outputs.check(
        &[b, 1, d.embed],
        want_weights.then_some(&[b, d.heads, 1, cap][..]),
    )?;

    let q = GpuTensor::allocate(ctx, "q", &[b, d.heads, 1, d.head_dim])?;
    let [pk, pv] = device::keys_values(w, ("x", x), &cache.k, &cache.v, b, 1, cap, len)?;
    let pq = device::query(w, x, &q, b, 1)?;
    device::submit(ctx, "projecting a step's q, k and v", &[pq, pk, pv]).await?;

    let seen: Vec<u32> = vec![device::u32_of("kv_cache", len + 1)?; b];
    let allowed = opts
        .key_padding_mask
        .map(|m| allowed_keys(m.slice(s![.., ..(len + 1)]), cap));
    let attn = AttentionOptions {
        kv_lens: Some(&seen),
        mask: allowed.as_ref().map(|a| Mask::Bool(a.view().into_dyn())),
        return_weights: want_weights,
        ..Default::default()
    };
    let qkv = [&q, &cache.k, &cache.v];
    attend_and_project(ctx, w, qkv, &attn, outputs, (b, 1), "a step's output").await?;
    cache.len = len + 1;
    Ok(())
}

/// Self-attention over x `(B, L, E)` fed one token at a time through a fresh cache of
/// capacity L: the same result as [`mha_async`](crate::mha_async) with
/// `causal: true`, within f32 rounding. Weights, when asked, are `(B, L, L)` or
/// `(B, H, L, L)` with row `t` from step `t`.
///
/// # Errors
/// As [`mha_step_into_async`], with the mask checked as `(B, L)` first.
pub async fn mha_incremental_async(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    x: ArrayView3<'_, f32>,
    opts: &MhaOptions<'_>,
) -> Result<MhaOutput> {
    let p = validate(w.dims, x.shape(), None, opts)?;
    let (b, l, d) = (p.batch, p.len_q, p.dims);
    let mut cache = KvCache::new(ctx, w, b, l)?;
    let step_opts = MhaOptions {
        weights: match opts.weights {
            HeadWeights::None => HeadWeights::None,
            _ => HeadWeights::PerHead,
        },
        ..opts.clone()
    };
    let mut y = try_zeros::<f32, _>("y", Ix3(b, l, d.embed))?;
    // The (B, H, L, L) weights only when asked for, and only if memory can hold them.
    let mut weights = match opts.weights {
        HeadWeights::None => None,
        _ => Some(try_zeros::<f32, _>("attn_weights", Ix4(b, d.heads, l, l))?),
    };
    for t in 0..l {
        let xt = GpuTensor::upload(ctx, "x", x.slice(s![.., t..t + 1, ..]).into_dyn())?;
        let outputs = MhaGpuOutputs {
            y: GpuTensor::allocate(ctx, "y", &[b, 1, d.embed])?,
            weights: (step_opts.weights != HeadWeights::None)
                .then(|| GpuTensor::allocate(ctx, "attn_weights", &[b, d.heads, 1, l]))
                .transpose()?,
        };
        mha_step_into_async(ctx, w, &mut cache, &xt, &step_opts, &outputs).await?;
        let step =
            read_outputs(ctx, &outputs.y, outputs.weights.as_ref(), step_opts.weights).await?;
        y.slice_mut(s![.., t..t + 1, ..]).assign(&step.y);
        if let (Some(sw), Some(weights)) = (step.weights, &mut weights) {
            // (B, H, 1, L) per head: row t.
            let sw = sw.index_axis_move(Axis(2), 0);
            weights.slice_mut(s![.., .., t, ..]).assign(&sw);
        }
    }
    let weights = match (opts.weights, weights) {
        (HeadWeights::Averaged, Some(w)) => Some(average_heads(&w)),
        (HeadWeights::PerHead, Some(w)) => Some(w.into_dyn()),
        _ => None,
    };
    Ok(MhaOutput { y, weights })
}

/// Blocking form of [`mha_incremental_async`]. Native only.
///
/// # Errors
/// As [`mha_incremental_async`].
#[cfg(not(target_arch = "wasm32"))]
pub fn mha_incremental(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    x: ArrayView3<'_, f32>,
    opts: &MhaOptions<'_>,
) -> Result<MhaOutput> {
    pollster::block_on(mha_incremental_async(ctx, w, x, opts))
}
