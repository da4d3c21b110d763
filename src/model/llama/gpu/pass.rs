//! One pass of new tokens through the model on the device.
//!
//! Per layer: the projections go through the crate's linear kernel (keys and values
//! written straight into the layer's KV store at their positions), RoPE rotates q and the
//! new keys in place, attention goes through [`attention_gpu_into_async`] on the KV store
//! itself (query head h reads KV head h / (Hq/Hkv), nothing copied), and the residual
//! adds ride in the RMSNorm kernel that follows them. A pass over a prompt is causal from
//! position 0; a pass over one new token attends to every key stored so far through the
//! per-batch key length, which is the causal rule for its row. Nothing is read back here.

use super::device::{record_linear, ErrorScopes, HeadLayout, Linear};
use super::kernels::{self, MatvecLayout, RopeSpan};
use super::{GpuLayer, LlamaGpu};
use crate::model::ModelError;
use crate::{attention_gpu_into_async, AttentionOptions, GpuContext, GpuOutputs, GpuTensor};

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
            proj: t(&[rows, c.hidden])?,
            gate: t(&[rows, c.intermediate])?,
            up: t(&[rows, c.intermediate])?,
            logits: t(&[1, c.vocab])?,
        })
    }
}

fn u32_of(n: usize) -> Result<u32, ModelError> {
    u32::try_from(n).map_err(|_| ModelError::input("ids", format!("{n} exceeds 32 bits")))
}

async fn submit(
    ctx: &GpuContext,
    encoder: wgpu::CommandEncoder,
    scopes: ErrorScopes,
    what: &str,
) -> Result<(), ModelError> {
    ctx.queue().submit([encoder.finish()]);
    scopes.pop(ctx, what).await?;
    Ok(())
}

/// One projection `y = x Wᵀ` of `call.rows` rows: the crate's linear kernel for several
/// rows; for one row (a decoding step, the logits) the one-row kernel, since the linear
/// kernel's 16-row tiles would do sixteen times the work.
async fn project(
    ctx: &GpuContext,
    enc: &mut wgpu::CommandEncoder,
    call: &Linear<'_>,
) -> Result<(), ModelError> {
    let (xl, yl) = (call.x.2, call.y.2);
    // A single row lies contiguously when x has one head, or one position per head.
    if call.rows == 1 && (xl.heads == 1 || xl.cap == 1) {
        let at = MatvecLayout {
            x_off: xl.off as usize * xl.dim as usize,
            dim: yl.dim as usize,
            cap: yl.cap as usize,
            off: yl.off as usize,
        };
        return kernels::matvec(ctx, enc, call.x.1, call.w.1, call.y.1, &at).await;
    }
    record_linear(ctx, enc, call).await?;
    Ok(())
}

/// Runs `ids` (the tokens at positions `kv.len..`) through the model, appending their
/// keys and values to `kv`; leaves the final norm's rows in `ws.xn` and the last row's
/// logits in `ws.logits`. With `weights`, one `(1, heads, rows, kv.cap)` tensor per layer
/// receives the attention probabilities.
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
    let (l32, h32, d32) = (u32_of(l)?, u32_of(h)?, u32_of(d)?);
    let rows = HeadLayout::rows(l32, h32);
    let q_heads = HeadLayout::heads(l32, u32_of(hq)?, d32, l32, 0);
    let kv_heads = HeadLayout::heads(l32, u32_of(hkv)?, d32, u32_of(cap)?, u32_of(off)?);
    let ffn_rows = HeadLayout::rows(l32, u32_of(f)?);
    let zeros = &m.zeros;
    ctx.queue()
        .write_buffer(&ws.ids, 0, bytemuck::cast_slice(ids));

    let mut scopes = ErrorScopes::push(ctx);
    let mut enc = ctx.device().create_command_encoder(&Default::default());
    kernels::embed(ctx, &mut enc, &ws.ids, l, &m.embed, &ws.x).await?;
    let first_norm = m.layers.first().map_or(&m.out_norm, |lw| &lw.attn_norm);
    kernels::rmsnorm(
        ctx, &mut enc, &ws.x, None, zeros, first_norm, &ws.xn, l, c.rms_eps,
    )
    .await?;
    let seen = [u32_of(off + l)?];
    for (li, lw) in m.layers.iter().enumerate() {
        let GpuLayer { wq, wk, wv, .. } = lw;
        let lin = |w: (&'static str, &'static str), wt, y, y_layout| -> Linear<'_> {
            Linear {
                x: ("x", &ws.xn, rows),
                w: (w.0, wt),
                bias: ("bias", zeros),
                y: (w.1, y, y_layout),
                rows: l,
            }
        };
        let projections = [
            lin(("attn_q.weight", "q"), wq, &ws.q, q_heads),
            lin(("attn_k.weight", "k"), wk, &kv.k[li], kv_heads),
            lin(("attn_v.weight", "v"), wv, &kv.v[li], kv_heads),
        ];
        for p in &projections {
            project(ctx, &mut enc, p).await?;
        }
        let q_span = RopeSpan {
            heads: hq,
            dim: d,
            cap: l,
            off: 0,
            rows: l,
            pos0: off,
        };
        kernels::rope(ctx, &mut enc, &ws.q, &m.rope, &q_span).await?;
        let k_span = RopeSpan {
            heads: hkv,
            cap,
            off,
            ..q_span
        };
        kernels::rope(ctx, &mut enc, &kv.k[li], &m.rope, &k_span).await?;
        submit(ctx, enc, scopes, "llama projections").await?;

        let opts = AttentionOptions {
            causal: l > 1,
            kv_lens: Some(&seen),
            return_weights: weights.is_some(),
            ..Default::default()
        };
        let outputs = GpuOutputs {
            out: ws.attn.clone(),
            weights: weights.and_then(|w| w.get(li).cloned()),
            lse: None,
        };
        attention_gpu_into_async(ctx, &ws.q, &kv.k[li], &kv.v[li], &opts, &outputs).await?;

        scopes = ErrorScopes::push(ctx);
        enc = ctx.device().create_command_encoder(&Default::default());
        let out_proj = Linear {
            x: ("attention", &ws.attn, q_heads),
            w: ("attn_output.weight", &lw.wo),
            bias: ("bias", zeros),
            y: ("attn_output", &ws.proj, rows),
            rows: l,
        };
        project(ctx, &mut enc, &out_proj).await?;
        kernels::rmsnorm(
            ctx,
            &mut enc,
            &ws.x,
            Some(&ws.proj),
            zeros,
            &lw.ffn_norm,
            &ws.xn,
            l,
            c.rms_eps,
        )
        .await?;
        for (w, y) in [(&lw.gate, &ws.gate), (&lw.up, &ws.up)] {
            let call = Linear {
                x: ("x", &ws.xn, rows),
                w: ("ffn weight", w),
                bias: ("bias", zeros),
                y: ("ffn", y, ffn_rows),
                rows: l,
            };
            project(ctx, &mut enc, &call).await?;
        }
        kernels::silu_mul(ctx, &mut enc, &ws.gate, &ws.up, l * f).await?;
        let down = Linear {
            x: ("ffn", &ws.gate, ffn_rows),
            w: ("ffn_down.weight", &lw.down),
            bias: ("bias", zeros),
            y: ("ffn_down", &ws.proj, rows),
            rows: l,
        };
        project(ctx, &mut enc, &down).await?;
        let next_norm = m.layers.get(li + 1).map_or(&m.out_norm, |n| &n.attn_norm);
        kernels::rmsnorm(
            ctx,
            &mut enc,
            &ws.x,
            Some(&ws.proj),
            zeros,
            next_norm,
            &ws.xn,
            l,
            c.rms_eps,
        )
        .await?;
    }
    let head = Linear {
        x: ("hidden", &ws.xn, HeadLayout::heads(1, 1, h32, l32, l32 - 1)),
        w: ("output.weight", m.lm_head.as_ref().unwrap_or(&m.embed)),
        bias: ("bias", zeros),
        y: ("logits", &ws.logits, HeadLayout::rows(1, u32_of(c.vocab)?)),
        rows: 1,
    };
    project(ctx, &mut enc, &head).await?;
    submit(ctx, enc, scopes, "llama layers").await?;
    kv.len = off + l;
    Ok(())
}
