//! The encoder on the GPU: the model kernels (embedding gather, residual + LayerNorm),
//! the crate's dense-layer kernel for every projection (GELU fused into the intermediate
//! one), and the crate's own attention, prepared once per pass and recorded for each
//! layer. The whole pass is one command encoder and one submission; the last hidden
//! state and the attention probabilities come back in one readback.

use ndarray::{Array2, Array4};

use super::batch::PaddedBatch;
use super::config::BertConfig;
use super::weights::{BertWeights, Dense, Norm};
use crate::model::ops::{
    read_tensors, submit, upload_ids, vec4_reads, wait_idle, AddNorm, AddNormKernel, Elem, Embed,
    EmbedKernel, Epilogue, HeadLayout, Linear, LinearKernel, LinearNeed, LinearProblem, Recorder,
    WeightsRef,
};
use crate::model::stages::Clock;
use crate::model::{HeadPatch, LayerInputs, ModelError};
use crate::{AttentionBuffers, AttentionOptions, GpuContext, GpuTensor, PreparedAttention};

pub(crate) struct DenseGpu {
    w: GpuTensor,
    b: GpuTensor,
}

pub(crate) struct NormGpu {
    w: GpuTensor,
    b: GpuTensor,
}

pub(crate) struct LayerGpu {
    query: DenseGpu,
    key: DenseGpu,
    value: DenseGpu,
    attn_out: DenseGpu,
    attn_norm: NormGpu,
    intermediate: DenseGpu,
    output: DenseGpu,
    out_norm: NormGpu,
}

/// The weights on one device.
pub(crate) struct DeviceWeights {
    word: GpuTensor,
    position: GpuTensor,
    token_type: GpuTensor,
    embed_norm: NormGpu,
    layers: Vec<LayerGpu>,
}

fn up2(ctx: &GpuContext, a: &Array2<f32>) -> Result<GpuTensor, ModelError> {
    Ok(GpuTensor::from_array(ctx, a.view().into_dyn())?)
}

fn up1(ctx: &GpuContext, a: &ndarray::Array1<f32>) -> Result<GpuTensor, ModelError> {
    Ok(GpuTensor::from_array(ctx, a.view().into_dyn())?)
}

fn dense(ctx: &GpuContext, d: &Dense) -> Result<DenseGpu, ModelError> {
    Ok(DenseGpu {
        w: up2(ctx, &d.w)?,
        b: up1(ctx, &d.b)?,
    })
}

fn norm(ctx: &GpuContext, n: &Norm) -> Result<NormGpu, ModelError> {
    Ok(NormGpu {
        w: up1(ctx, &n.w)?,
        b: up1(ctx, &n.b)?,
    })
}

impl DeviceWeights {
    pub(crate) fn upload(ctx: &GpuContext, w: &BertWeights) -> Result<Self, ModelError> {
        let layers = w
            .layers
            .iter()
            .map(|l| {
                Ok(LayerGpu {
                    query: dense(ctx, &l.query)?,
                    key: dense(ctx, &l.key)?,
                    value: dense(ctx, &l.value)?,
                    attn_out: dense(ctx, &l.attn_out)?,
                    attn_norm: norm(ctx, &l.attn_norm)?,
                    intermediate: dense(ctx, &l.intermediate)?,
                    output: dense(ctx, &l.output)?,
                    out_norm: norm(ctx, &l.out_norm)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            word: up2(ctx, &w.word)?,
            position: up2(ctx, &w.position)?,
            token_type: up2(ctx, &w.token_type)?,
            embed_norm: norm(ctx, &w.embed_norm)?,
            layers,
        })
    }
}

/// The activations of one forward pass, allocated once for its batch and length.
struct Scratch {
    embedded: GpuTensor,
    x: GpuTensor,
    mid: GpuTensor,
    proj: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    heads_out: GpuTensor,
    inter: GpuTensor,
}

impl Scratch {
    /// `batch` sentences of `len` rows each.
    fn new(ctx: &GpuContext, c: &BertConfig, batch: usize, len: usize) -> Result<Self, ModelError> {
        let (h, heads, dim) = (c.hidden_size, c.num_attention_heads, c.head_dim());
        let rows = |w: usize| GpuTensor::empty(ctx, &[batch * len, w]);
        let split = || GpuTensor::empty(ctx, &[batch, heads, len, dim]);
        Ok(Self {
            embedded: rows(h)?,
            x: rows(h)?,
            mid: rows(h)?,
            proj: rows(h)?,
            q: split()?,
            k: split()?,
            v: split()?,
            heads_out: split()?,
            inter: rows(c.intermediate_size)?,
        })
    }
}

/// The kernels of a forward pass, built before anything is recorded (decide, then
/// record): recording them only encodes.
struct Kernels {
    embed: EmbedKernel,
    add_norm: AddNormKernel,
    linear: LinearKernel,
}

impl Kernels {
    /// The kernels of a pass whose dense layers are `dense` (only the shapes they take).
    async fn prepare(
        ctx: &GpuContext,
        c: &BertConfig,
        dense: &[LinearProblem],
    ) -> Result<Self, ModelError> {
        // The dense layers read rows of hidden_size and intermediate_size and heads of
        // head_dim: four at a time where all three allow (MiniLM), else also one at a time.
        let widths = [c.hidden_size, c.intermediate_size, c.head_dim()];
        let vec4 = widths
            .iter()
            .all(|&w| vec4_reads(HeadLayout::rows(1, w as u32), w));
        let needs: Vec<LinearNeed> = [true, false]
            .into_iter()
            .filter(|&v| v || !vec4)
            .map(|vec4| LinearNeed {
                elem: Elem::F32,
                vec4,
            })
            .collect();
        Ok(Self {
            embed: EmbedKernel::prepare(ctx).await?,
            add_norm: AddNormKernel::prepare(ctx).await?,
            linear: LinearKernel::prepare_for_problems(ctx, &needs, dense).await?,
        })
    }
}

/// With a clock: submits what the recorder holds, waits for the device, and charges the
/// time to `stage`. Without one: nothing (the work stays in the encoder).
async fn lap(
    ctx: &GpuContext,
    rec: &mut Recorder<'_>,
    clock: &mut Option<&mut Clock>,
    stage: &'static str,
) -> Result<(), ModelError> {
    let Some(clock) = clock.as_deref_mut() else {
        return Ok(());
    };
    let done = std::mem::replace(
        rec.encoder(),
        ctx.device().create_command_encoder(&Default::default()),
    );
    submit(ctx, done, stage).await?;
    wait_idle(ctx)?;
    clock.lap(stage);
    Ok(())
}

/// What a pass gives back besides the hidden state, and what it changes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Want<'a> {
    /// The attention probabilities of every layer.
    pub attention: bool,
    /// Every layer's q, k and v (one sentence only).
    pub inputs: bool,
    /// One head's attention output replaced (one sentence only; checked by the caller).
    pub patch: Option<&'a HeadPatch>,
}

/// What [`forward`] returns: the last hidden state `(B·L, hidden)` (sentence b's rows at
/// `b·L..`, padding rows included) and what [`Want`] asked for: the attention
/// probabilities `(layers·B, heads, L, L)` and every layer's q, k and v.
pub(crate) struct Pass {
    pub hidden: Array2<f32>,
    pub attention: Option<Array4<f32>>,
    pub inputs: Vec<LayerInputs>,
}

/// Runs the encoder over a batch of B sentences padded to L tokens. The ids are already
/// checked. With a clock, each stage is submitted and timed on its own.
pub(crate) async fn forward(
    ctx: &GpuContext,
    c: &BertConfig,
    w: &DeviceWeights,
    tokens: &PaddedBatch,
    want: Want<'_>,
    mut clock: Option<&mut Clock>,
) -> Result<Pass, ModelError> {
    let attention = want.attention;
    // `l` counts the rows of every sentence together (what the dense layers and norms
    // run over); `l32` is one sentence's padded length (where the head layouts and the
    // attention call start a new sentence).
    let (batch, len) = (tokens.batch(), tokens.len);
    let (l, h, heads, dim) = (
        batch * len,
        c.hidden_size,
        c.num_attention_heads,
        c.head_dim(),
    );
    let dense = |cols, inner| LinearProblem {
        rows: l,
        cols,
        inner,
    };
    let f = c.intermediate_size;
    let dense_problems = [dense(h, h), dense(f, h), dense(h, f)];
    let k = Kernels::prepare(ctx, c, &dense_problems).await?;
    // With tuning on, the dense layers' shapes are timed once per class (see linear_tune).
    k.linear.tune(ctx, &dense_problems).await?;
    let s = Scratch::new(ctx, c, batch, len)?;
    // Key padding: each sentence attends to its own tokens only. An unpadded batch needs
    // no key lengths (and takes the attention path a single sequence always took).
    let kv_lens = (!tokens.unpadded()).then_some(tokens.lens.as_slice());
    let opts = AttentionOptions {
        return_weights: attention,
        kv_lens,
        ..Default::default()
    };
    let qkv_shape = [batch, heads, len, dim];
    let attend = PreparedAttention::new(ctx, &qkv_shape, &qkv_shape, &qkv_shape, &opts).await?;
    let probs = if attention {
        (0..w.layers.len())
            .map(|_| GpuTensor::empty(ctx, &[batch, heads, len, len]))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    // Copies of each layer's q, k and v, taken as the attention call reads them.
    let captured = if want.inputs {
        (0..w.layers.len() * 3)
            .map(|_| GpuTensor::empty(ctx, &qkv_shape))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let patch = match want.patch {
        Some(p) => Some((p, GpuTensor::from_array(ctx, p.out.view().into_dyn())?)),
        None => None,
    };
    let id_buffer = upload_ids(ctx, &tokens.ids)?;
    let eps = c.layer_norm_eps as f32;
    let l32 = len as u32;
    let rows = |width: usize| HeadLayout::rows(l32, width as u32);
    let split = HeadLayout::heads(l32, heads as u32, dim as u32, l32, 0);

    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    // Every kernel of the pass, attention's included, records into one compute pass; only
    // a copy (captured inputs, a patched head) or a stage clock's lap ends it.
    let mut rec = Recorder::new(&mut encoder);
    let embed = Embed {
        ids: &id_buffer,
        rows: l,
        rows_per_sequence: len,
        word: &w.word,
        position: &w.position,
        token_type: &w.token_type,
        out: &s.embedded,
    };
    k.embed.record(ctx, &mut rec, &embed)?;
    let norm = AddNorm {
        x: &s.embedded,
        residual: None,
        gamma: &w.embed_norm.w,
        beta: &w.embed_norm.b,
        y: &s.x,
        rows: l,
        eps,
    };
    k.add_norm.record(ctx, &mut rec, &norm)?;
    lap(ctx, &mut rec, &mut clock, "embeddings + LayerNorm").await?;

    for (n, layer) in w.layers.iter().enumerate() {
        for (d, out) in [
            (&layer.query, &s.q),
            (&layer.key, &s.k),
            (&layer.value, &s.v),
        ] {
            let call = Linear {
                x: ("x", &s.x, rows(h)),
                w: ("w", &d.w),
                bias: ("bias", &d.b),
                y: ("q/k/v", out, split),
                rows: l,
            };
            k.linear.record(ctx, &mut rec, &call)?;
        }
        for (from, to) in [&s.q, &s.k, &s.v]
            .into_iter()
            .zip(captured.iter().skip(3 * n))
        {
            rec.encoder().copy_buffer_to_buffer(
                from.buffer(),
                0,
                to.buffer(),
                0,
                from.len() as u64 * 4,
            );
        }
        lap(ctx, &mut rec, &mut clock, "q, k, v projections").await?;

        let buffers = AttentionBuffers {
            q: s.q.buffer(),
            k: s.k.buffer(),
            v: s.v.buffer(),
            out: s.heads_out.buffer(),
            weights: probs.get(n).map(GpuTensor::buffer),
            lse: None,
        };
        attend.record_in(ctx, &mut rec, &buffers)?;
        if let Some((p, out)) = patch.as_ref().filter(|(p, _)| p.layer == n) {
            // Head h of (1, heads, L, D) is one contiguous block.
            let bytes = out.len() as u64 * 4;
            let at = p.head as u64 * bytes;
            rec.encoder()
                .copy_buffer_to_buffer(out.buffer(), 0, s.heads_out.buffer(), at, bytes);
        }
        lap(ctx, &mut rec, &mut clock, "attention").await?;

        let merge = Linear {
            x: ("attention", &s.heads_out, split),
            w: ("w", &layer.attn_out.w),
            bias: ("bias", &layer.attn_out.b),
            y: ("attention output", &s.proj, rows(h)),
            rows: l,
        };
        k.linear.record(ctx, &mut rec, &merge)?;
        let norm = AddNorm {
            x: &s.proj,
            residual: Some(&s.x),
            gamma: &layer.attn_norm.w,
            beta: &layer.attn_norm.b,
            y: &s.mid,
            rows: l,
            eps,
        };
        k.add_norm.record(ctx, &mut rec, &norm)?;
        lap(
            ctx,
            &mut rec,
            &mut clock,
            "output projection + residual + LayerNorm",
        )
        .await?;
        // GELU fused into the store of the intermediate dense.
        let up = Linear {
            x: ("x", &s.mid, rows(h)),
            w: ("w", &layer.intermediate.w),
            bias: ("bias", &layer.intermediate.b),
            y: ("intermediate", &s.inter, rows(c.intermediate_size)),
            rows: l,
        };
        let gelu = Epilogue {
            gelu: true,
            residual: None,
        };
        let w_up = ("w", WeightsRef::F32(&layer.intermediate.w));
        k.linear.record_with(ctx, &mut rec, &up, w_up, gelu)?;
        lap(ctx, &mut rec, &mut clock, "intermediate dense + GELU").await?;
        let down = Linear {
            x: ("intermediate", &s.inter, rows(c.intermediate_size)),
            w: ("w", &layer.output.w),
            bias: ("bias", &layer.output.b),
            y: ("output", &s.proj, rows(h)),
            rows: l,
        };
        k.linear.record(ctx, &mut rec, &down)?;
        let norm = AddNorm {
            x: &s.proj,
            residual: Some(&s.mid),
            gamma: &layer.out_norm.w,
            beta: &layer.out_norm.b,
            y: &s.x,
            rows: l,
            eps,
        };
        k.add_norm.record(ctx, &mut rec, &norm)?;
        lap(
            ctx,
            &mut rec,
            &mut clock,
            "output dense + residual + LayerNorm",
        )
        .await?;
    }
    drop(rec);
    submit(ctx, encoder, "running the encoder layers").await?;

    let tensors: Vec<&GpuTensor> = std::iter::once(&s.x)
        .chain(&probs)
        .chain(&captured)
        .collect();
    let mut data = read_tensors(ctx, &tensors).await?.into_iter();
    let bug = |e: ndarray::ShapeError| {
        ModelError::Attention(crate::AttentionError::Device(format!("readback: {e}")))
    };
    let hidden = Array2::from_shape_vec((l, h), data.next().unwrap_or_default()).map_err(bug)?;
    let attention = if attention {
        let all: Vec<f32> = data.by_ref().take(probs.len()).flatten().collect();
        let shape = (w.layers.len() * batch, heads, len, len);
        Some(Array4::from_shape_vec(shape, all).map_err(bug)?)
    } else {
        None
    };
    let split = |v: Vec<f32>| Array4::from_shape_vec((batch, heads, len, dim), v).map_err(bug);
    let mut inputs = Vec::with_capacity(w.layers.len());
    for _ in 0..captured.len() / 3 {
        let mut next = || split(data.next().unwrap_or_default());
        inputs.push(LayerInputs {
            q: next()?,
            k: next()?,
            v: next()?,
        });
    }
    if let Some(clock) = clock {
        clock.lap("readback");
    }
    Ok(Pass {
        hidden,
        attention,
        inputs,
    })
}
