//! One pass of new tokens through the model on the device, recorded into one command
//! encoder and submitted once.
//!
//! Per layer, four products of the quantized matmul and attention between them (on a CPU
//! driver each dispatch costs about as much as a small product, so the neighbouring
//! kernels ride in the products):
//! - q, k and v: x RMS-normed as it is read, one product over `[Wq; Wk; Wv]` (or one per
//!   run of one weight type), RoPE applied to q and k in the epilogue, keys and values
//!   written straight into the layer's KV store at their positions;
//! - attention recorded from the KV store itself ([`PreparedAttention`]; query head h
//!   reads KV head h / (Hq/Hkv), nothing copied);
//! - the output projection added to the residual stream x;
//! - gate and up: x normed as it is read, one product over their interleaved rows ending
//!   in SwiGLU (two products and the SiLU·mul kernel when their types differ);
//! - the down projection added to x.
//!
//! A pass over a prompt is causal from position 0; a pass over one new token attends to
//! every key stored so far through the per-batch key length, which is the causal rule for
//! its row. Nothing is read back here.

use super::{GateUp, LlamaGpu};
use crate::model::ops::{
    x_tensor, BindCache, ErrorScopes, MergeHeadsKernel, OutLayout, QkvSplit, QuantEmbedKernel,
    QuantEpilogue, QuantMatmul, QuantMatmulKernel, QuantNorm, Recorder, RmsNorm, RmsNormKernel,
    SiluMulKernel, StageMarks,
};
use crate::model::ModelError;
use crate::{
    AttentionBuffers, AttentionOptions, GpuContext, GpuTensor, KernelPath, PreparedAttention,
};

/// Keys and values of every layer for up to `cap` tokens: `(1, kv_heads, cap, head_dim)`.
pub(crate) struct KvStore {
    pub k: Vec<GpuTensor>,
    pub v: Vec<GpuTensor>,
    pub cap: usize,
    pub len: usize,
    /// The attention a decoding step over this store records, kept between steps, and
    /// whether it returns the weights.
    decode: Option<(bool, PreparedAttention)>,
    /// The kernels of the last decoding step and the bind groups of its products: the
    /// next step binds the same buffers, and only the q/k/v products' positions change.
    step: Option<Kernels>,
    binds: BindCache,
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
        Ok(Self {
            k,
            v,
            cap,
            len: 0,
            decode: None,
            step: None,
            binds: BindCache::default(),
        })
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
            // What the products read as x, which they can then bind as their uniform
            // copy of it.
            x: x_tensor(ctx, &[rows, c.hidden])?,
            xn: x_tensor(ctx, &[rows, c.hidden])?,
            q: t(&[1, c.heads, rows, c.head_dim])?,
            attn: x_tensor(ctx, &[1, c.heads, rows, c.head_dim])?,
            merged: x_tensor(ctx, &[if rows > 1 { rows } else { 1 }, c.q_width()])?,
            gate: x_tensor(ctx, &[rows, c.intermediate])?,
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
    silu_mul: SiluMulKernel,
    merge: MergeHeadsKernel,
}

impl Kernels {
    /// The pipelines of a pass of `rows` tokens (one-row products only for one token).
    async fn prepare(ctx: &GpuContext, m: &LlamaGpu, rows: usize) -> Result<Self, ModelError> {
        Ok(Self {
            embed: QuantEmbedKernel::prepare(ctx, &m.embed).await?,
            matmul: QuantMatmulKernel::prepare_variants(ctx, &m.products(rows)).await?,
            norm: RmsNormKernel::prepare(ctx).await?,
            silu_mul: SiluMulKernel::prepare(ctx).await?,
            merge: MergeHeadsKernel::prepare(ctx).await?,
        })
    }
}

/// Where a pass leaves what it was asked for beyond the logits, one tensor per layer.
#[derive(Default, Clone, Copy)]
pub(crate) struct Taps<'a> {
    /// `(1, heads, rows, kv.cap)`: the attention probabilities.
    pub weights: Option<&'a [GpuTensor]>,
    /// `(1, heads, rows, head_dim)`: the queries after RoPE, as attention reads them.
    pub queries: Option<&'a [GpuTensor]>,
    /// `(layer, head, rows × head_dim)`: that head's attention output replaced.
    pub patch: Option<(usize, usize, &'a GpuTensor)>,
}

/// The stages [`run`] marks, in order, after the mark that starts the clock: the
/// embedding, then per layer q/k/v, attention, the output projection, gate/up and
/// down, then the final norm and the logits head.
pub(crate) const STAGES: [&str; 7] = [
    "embedding",
    "q/k/v projection",
    "attention",
    "output projection",
    "gate/up projection",
    "down projection",
    "final norm + logits head",
];

/// Marks a pass of `m` makes with [`run`].
pub(crate) fn marks_per_pass(m: &LlamaGpu) -> u32 {
    (3 + 5 * m.layers.len()) as u32
}

/// Runs `ids` (the tokens at positions `kv.len..`) through the model, appending their
/// keys and values to `kv`; leaves the final norm's rows in `ws.xn` and the last row's
/// logits in `ws.logits`, and what `taps` asks for in its tensors. One submission;
/// nothing is read back. With `marks` (sized by [`marks_per_pass`]), a timestamp ends
/// each of [`STAGES`] in every layer.
pub(crate) async fn run(
    ctx: &GpuContext,
    m: &LlamaGpu,
    ws: &Workspace,
    kv: &mut KvStore,
    ids: &[u32],
    taps: Taps<'_>,
    mut marks: Option<&mut StageMarks>,
) -> Result<(), ModelError> {
    let weights = taps.weights;
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
    let kern = match kv.step.take() {
        Some(kern) if l == 1 => kern,
        _ => Kernels::prepare(ctx, m, l).await?,
    };
    // One new token against the cache takes the split-KV decode whatever the cache's
    // length: Auto keeps it for 1,024 keys and more, but below that its fused kernel
    // spends a workgroup of rows on the one query row (on lavapipe a decoding step's
    // attention took 18 ms over 30 layers fused against 10 ms decoded, at 37 keys).
    let opts = AttentionOptions {
        causal: l > 1,
        kv_lens: Some(&seen),
        return_weights: weights.is_some(),
        path: if l == 1 {
            KernelPath::Decode
        } else {
            KernelPath::Auto
        },
        ..Default::default()
    };
    // A decoding step reuses the store's prepared call (with the same outputs asked
    // for), its key length updated, rather than validating, routing and uploading again.
    let attention = match kv.decode.take() {
        Some((with_weights, a)) if l == 1 && with_weights == weights.is_some() => {
            a.set_kv_lens(ctx, &seen)?;
            a
        }
        _ => {
            PreparedAttention::new(
                ctx,
                &[1, hq, l, d],
                &[1, hkv, cap, d],
                &[1, hkv, cap, d],
                &opts,
            )
            .await?
        }
    };
    ctx.queue()
        .write_buffer(&ws.ids, 0, bytemuck::cast_slice(ids));

    let scopes = ErrorScopes::push(ctx);
    let mut enc = ctx.device().create_command_encoder(&Default::default());
    // Every kernel of the step, attention's included, records into one compute pass;
    // only a mark or a copy (stage timing, taps) ends it and opens the next. A decoding
    // step's products take the bind groups of the step before where nothing changed.
    let mut rec = if l == 1 {
        Recorder::with_binds(&mut enc, &mut kv.binds)
    } else {
        Recorder::new(&mut enc)
    };
    let e = &mut rec;
    let mut mark = |e: &mut Recorder<'_>, stage: &'static str| {
        if let Some(marks) = marks.as_deref_mut() {
            marks.mark(e.encoder(), stage);
        }
    };
    let [embedding, qkv_stage, attention_stage, out_stage, gate_up_stage, down_stage, head_stage] =
        STAGES;
    mark(e, "start");
    let eps = c.rms_eps as f32;
    kern.embed.record(ctx, e, (&ws.ids, l), &m.embed, &ws.x)?;
    mark(e, embedding);
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
    let product = |x, w, y, layout, norm, epilogue| QuantMatmul {
        x,
        x_off: 0,
        rows: l,
        w,
        y,
        layout,
        norm,
        epilogue,
    };
    for (li, lw) in m.layers.iter().enumerate() {
        let slot = |i| m.norm_rows.as_ref().and_then(|n| n.slot(i));
        let attn_norm = Some(QuantNorm {
            weight: &lw.attn_norm,
            eps,
            uniform: slot(2 * li),
        });
        for (col0, w) in &lw.qkv {
            let split = QkvSplit {
                k: &kv.k[li],
                v: &kv.v[li],
                col0: *col0,
                q_end: hq * d,
                k_end: (hq + hkv) * d,
                kv: kv_layout,
                table: &m.rope,
                positions: c.context,
                pos0: off,
            };
            let call = product(
                &ws.x,
                w,
                &ws.q,
                q_layout,
                attn_norm,
                QuantEpilogue::Qkv(split),
            );
            kern.matmul.record(ctx, e, &call)?;
        }
        mark(e, qkv_stage);
        if let Some(to) = taps.queries.and_then(|t| t.get(li)) {
            let bytes = ws.q.len() as u64 * 4;
            e.encoder()
                .copy_buffer_to_buffer(ws.q.buffer(), 0, to.buffer(), 0, bytes);
        }
        let buffers = AttentionBuffers {
            q: ws.q.buffer(),
            k: kv.k[li].buffer(),
            v: kv.v[li].buffer(),
            out: ws.attn.buffer(),
            weights: weights.and_then(|w| w.get(li)).map(GpuTensor::buffer),
            lse: None,
        };
        attention.record_in(ctx, e, &buffers)?;
        mark(e, attention_stage);
        if let Some((_, head, out)) = taps.patch.filter(|(layer, _, _)| *layer == li) {
            // Head h of (1, heads, rows, D) is one contiguous block.
            let bytes = out.len() as u64 * 4;
            e.encoder().copy_buffer_to_buffer(
                out.buffer(),
                0,
                ws.attn.buffer(),
                head as u64 * bytes,
                bytes,
            );
        }
        // For one token (1, heads, 1, D) is already the row (1, heads * D).
        let attn_rows = if l > 1 {
            kern.merge
                .record(ctx, e, (&ws.attn, &ws.merged), (l, hq, d))?;
            &ws.merged
        } else {
            &ws.attn
        };
        let out = product(attn_rows, &lw.wo, &ws.x, rows, None, QuantEpilogue::Add);
        kern.matmul.record(ctx, e, &out)?;
        mark(e, out_stage);
        let ffn_norm = Some(QuantNorm {
            weight: &lw.ffn_norm,
            eps,
            uniform: slot(2 * li + 1),
        });
        match &lw.gate_up {
            GateUp::Interleaved(w) => {
                let swiglu = QuantEpilogue::SwiGlu;
                let call = product(&ws.x, w, &ws.gate, ffn_rows, ffn_norm, swiglu);
                kern.matmul.record(ctx, e, &call)?;
            }
            GateUp::Split { gate, up } => {
                let store = QuantEpilogue::Store;
                let g = product(&ws.x, gate, &ws.gate, ffn_rows, ffn_norm, store);
                kern.matmul.record(ctx, e, &g)?;
                let u = product(&ws.x, up, &ws.up, ffn_rows, ffn_norm, store);
                kern.matmul.record(ctx, e, &u)?;
                kern.silu_mul.record(ctx, e, &ws.gate, &ws.up, l * f)?;
            }
        }
        mark(e, gate_up_stage);
        let down = product(&ws.gate, &lw.down, &ws.x, rows, None, QuantEpilogue::Add);
        kern.matmul.record(ctx, e, &down)?;
        mark(e, down_stage);
    }
    kern.norm.record(
        ctx,
        e,
        &RmsNorm {
            x: &ws.x,
            delta: None,
            dummy: &m.zeros,
            weight: &m.out_norm,
            out: &ws.xn,
            rows: l,
            eps,
        },
    )?;
    let head = QuantMatmul::plain(
        (&ws.xn, (l - 1) * h, 1),
        m.lm_head.as_ref().unwrap_or(&m.embed),
        &ws.logits,
        OutLayout::rows(1, c.vocab),
    );
    kern.matmul.record(ctx, e, &head)?;
    mark(e, head_stage);
    drop(rec);
    if let Some(marks) = marks.as_deref() {
        marks.resolve(&mut enc);
    }
    ctx.queue().submit([enc.finish()]);
    scopes.pop(ctx, "llama forward pass").await?;
    kv.len = off + l;
    if l == 1 {
        kv.decode = Some((weights.is_some(), attention));
        kv.step = Some(kern);
    }
    Ok(())
}
