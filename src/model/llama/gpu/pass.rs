//! One pass of new tokens through the model on the device, recorded into one command
//! encoder and submitted once.
//!
//! Per layer: the projections go through the quantized matmul (keys and values written
//! straight into the layer's KV store at their positions), RoPE rotates q and the new keys
//! in place, attention is recorded from the KV store itself ([`PreparedAttention`]; query
//! head h reads KV head h / (Hq/Hkv), nothing copied), and the residual adds ride in the
//! RMSNorm kernel that follows them. A pass over a prompt is causal from position 0; a
//! pass over one new token attends to every key stored so far through the per-batch key
//! length, which is the causal rule for its row. Nothing is read back here.

use super::{GpuLayer, LlamaGpu};
use crate::model::ops::{
    ErrorScopes, MergeHeadsKernel, OutLayout, QuantEmbedKernel, QuantMatmul, QuantMatmulKernel,
    QuantMatrix, RmsNorm, RmsNormKernel, RopeKernel, RopeSpan, SiluMulKernel,
};
use crate::model::ModelError;
use crate::{AttentionBuffers, AttentionOptions, GpuContext, GpuTensor, PreparedAttention};

/// Keys and values of every layer for up to `cap` tokens: `(1, kv_heads, cap, head_dim)`.
pub(crate) struct KvStore {
    pub k: Vec<GpuTensor>,
    pub v: Vec<GpuTensor>,
    pub cap: usize,
    pub len: usize,
}

impl KvStore {
    pub(crate) fn new(ctx: &GpuContext, m: &LlamaGpu, cap: usize) -> Result<Self, ModelError> {
        let c = &m.config;
        let shape = [1, c.kv_heads, cap, c.head_dim];
        let mut k = Vec::with_capacity(c.layers);
        let mut v = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            k.push(GpuTensor::empty(ctx, &shape)?);
            v.push(GpuTensor::empty(ctx, &shape)?);
        }
        Ok(Self { k, v, cap, len: 0 })
    }
}

/// The activations of a pass over `rows` tokens.
pub(crate) struct Workspace {
    pub rows: usize,
    ids: wgpu::Buffer,
    x: GpuTensor,
    /// `(rows, hidden)`: the normed rows; after a pass, the final norm's output.
    pub xn: GpuTensor,
    q: GpuTensor,
    attn: GpuTensor,
    /// `(rows, heads * head_dim)`: attention's output as rows, for passes of several rows.
    merged: GpuTensor,
    proj: GpuTensor,
    gate: GpuTensor,
    up: GpuTensor,
    /// `(1, vocab)` at the last row.
    pub logits: GpuTensor,
}

impl Workspace {
    pub(crate) fn new(ctx: &GpuContext, m: &LlamaGpu, rows: usize) -> Result<Self, ModelError> {
        let c = &m.config;
        let t = |shape: &[usize]| GpuTensor::empty(ctx, shape);
        let ids = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("llama ids"),
            size: (rows as u64 * 4).max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Self {
            rows,
            ids,
            x: t(&[rows, c.hidden])?,
            xn: t(&[rows, c.hidden])?,
            q: t(&[1, c.heads, rows, c.head_dim])?,
            attn: t(&[1, c.heads, rows, c.head_dim])?,
            merged: t(&[if rows > 1 { rows } else { 1 }, c.q_width()])?,
            proj: t(&[rows, c.hidden])?,
            gate: t(&[rows, c.intermediate])?,
            up: t(&[rows, c.intermediate])?,
            logits: t(&[1, c.vocab])?,
        })
    }
}

/// The pipelines one pass records with.
struct Kernels {
    embed: QuantEmbedKernel,
    matmul: QuantMatmulKernel,
    norm: RmsNormKernel,
    rope: RopeKernel,
    silu_mul: SiluMulKernel,
    merge: MergeHeadsKernel,
}

impl Kernels {
    async fn prepare(ctx: &GpuContext, m: &LlamaGpu) -> Result<Self, ModelError> {
        Ok(Self {
            embed: QuantEmbedKernel::prepare(ctx, &m.embed).await?,
            matmul: QuantMatmulKernel::prepare(ctx, &m.types).await?,
            norm: RmsNormKernel::prepare(ctx).await?,
            rope: RopeKernel::prepare(ctx).await?,
            silu_mul: SiluMulKernel::prepare(ctx).await?,
            merge: MergeHeadsKernel::prepare(ctx).await?,
        })
    }
}

/// Runs `ids` (the tokens at positions `kv.len..`) through the model, appending their
/// keys and values to `kv`; leaves the final norm's rows in `ws.xn` and the last row's
/// logits in `ws.logits`. With `weights`, one `(1, heads, rows, kv.cap)` tensor per layer
/// receives the attention probabilities. One submission; nothing is read back.
pub(crate) async fn run(
    ctx: &GpuContext,
    m: &LlamaGpu,
    ws: &Workspace,
    kv: &mut KvStore,
    ids: &[u32],
    weights: Option<&[GpuTensor]>,
) -> Result<(), ModelError> {
    let c = &m.config;
    let (l, off, cap) = (ids.len(), kv.len, kv.cap);
    if l == 0 || l != ws.rows || off + l > cap || (l > 1 && off != 0) {
        return Err(ModelError::format(
            "llama gpu",
            format!("a pass of {l} tokens at {off} into a store of {cap}: several tokens only from position 0"),
        ));
    }
    let (h, hq, hkv, d, f) = (c.hidden, c.heads, c.kv_heads, c.head_dim, c.intermediate);
    let seen = [u32::try_from(off + l)
        .map_err(|_| ModelError::input("ids", format!("{} positions exceed 32 bits", off + l)))?];
    let kern = Kernels::prepare(ctx, m).await?;
    let opts = AttentionOptions {
        causal: l > 1,
        kv_lens: Some(&seen),
        return_weights: weights.is_some(),
        ..Default::default()
    };
    let attention = PreparedAttention::new(
        ctx,
        &[1, hq, l, d],
        &[1, hkv, cap, d],
        &[1, hkv, cap, d],
        &opts,
    )
    .await?;
    ctx.queue()
        .write_buffer(&ws.ids, 0, bytemuck::cast_slice(ids));

    let scopes = ErrorScopes::push(ctx);
    let mut enc = ctx.device().create_command_encoder(&Default::default());
    let e = &mut enc;
    let project = |e: &mut wgpu::CommandEncoder, x: &GpuTensor, w: &QuantMatrix, y, layout| {
        kern.matmul.record(
            ctx,
            e,
            &QuantMatmul {
                x,
                x_off: 0,
                rows: l,
                w,
                y,
                layout,
            },
        )
    };
    let norm = |e: &mut wgpu::CommandEncoder, delta, weight| {
        kern.norm.record(
            ctx,
            e,
            &RmsNorm {
                x: &ws.x,
                delta,
                dummy: &m.zeros,
                weight,
                out: &ws.xn,
                rows: l,
                eps: c.rms_eps as f32,
            },
        )
    };
    kern.embed.record(ctx, e, (&ws.ids, l), &m.embed, &ws.x)?;
    norm(
        e,
        None,
        m.layers.first().map_or(&m.out_norm, |lw| &lw.attn_norm),
    )?;
    let q_layout = OutLayout {
        len: l,
        heads: hq,
        dim: d,
        cap: l,
        off: 0,
    };
    let kv_layout = OutLayout {
        heads: hkv,
        cap,
        off,
        ..q_layout
    };
    let rows = OutLayout::rows(l, h);
    let ffn_rows = OutLayout::rows(l, f);
    for (li, lw) in m.layers.iter().enumerate() {
        let GpuLayer { wq, wk, wv, .. } = lw;
        project(e, &ws.xn, wq, &ws.q, q_layout)?;
        project(e, &ws.xn, wk, &kv.k[li], kv_layout)?;
        project(e, &ws.xn, wv, &kv.v[li], kv_layout)?;
        let q_span = RopeSpan {
            heads: hq,
            dim: d,
            cap: l,
            off: 0,
            rows: l,
            pos0: off,
        };
        kern.rope.record(ctx, e, &ws.q, &m.rope, &q_span)?;
        let k_span = RopeSpan {
            heads: hkv,
            cap,
            off,
            ..q_span
        };
        kern.rope.record(ctx, e, &kv.k[li], &m.rope, &k_span)?;
        let buffers = AttentionBuffers {
            q: ws.q.buffer(),
            k: kv.k[li].buffer(),
            v: kv.v[li].buffer(),
            out: ws.attn.buffer(),
            weights: weights.and_then(|w| w.get(li)).map(GpuTensor::buffer),
            lse: None,
        };
        attention.record(ctx, e, &buffers)?;
        // For one token (1, heads, 1, D) is already the row (1, heads * D).
        let attn_rows = if l > 1 {
            kern.merge
                .record(ctx, e, (&ws.attn, &ws.merged), (l, hq, d))?;
            &ws.merged
        } else {
            &ws.attn
        };
        project(e, attn_rows, &lw.wo, &ws.proj, rows)?;
        norm(e, Some(&ws.proj), &lw.ffn_norm)?;
        project(e, &ws.xn, &lw.gate, &ws.gate, ffn_rows)?;
        project(e, &ws.xn, &lw.up, &ws.up, ffn_rows)?;
        kern.silu_mul.record(ctx, e, &ws.gate, &ws.up, l * f)?;
        project(e, &ws.gate, &lw.down, &ws.proj, rows)?;
        let next_norm = m.layers.get(li + 1).map_or(&m.out_norm, |n| &n.attn_norm);
        norm(e, Some(&ws.proj), next_norm)?;
    }
    let head = QuantMatmul {
        x: &ws.xn,
        x_off: (l - 1) * h,
        rows: 1,
        w: m.lm_head.as_ref().unwrap_or(&m.embed),
        y: &ws.logits,
        layout: OutLayout::rows(1, c.vocab),
    };
    kern.matmul.record(ctx, e, &head)?;
    ctx.queue().submit([enc.finish()]);
    scopes.pop(ctx, "llama forward pass").await?;
    kv.len = off + l;
    Ok(())
}
