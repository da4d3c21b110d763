//! The model on the GPU: weights uploaded once as f32 (dequantized on the host), the
//! forward pass of `pass.rs`, and generation with a KV store on the device, so that each
//! new token after the prompt is one pass of one token and one readback of its logits.
//!
//! The crate's [`KvCache`](crate::KvCache) is made for [`MhaGpuWeights`](crate::MhaGpuWeights)
//! and projects x itself; here RoPE must rotate the keys between the projection and the
//! store, so [`pass::KvStore`] keeps the same layout (`(1, kv_heads, capacity, D)` per
//! layer, the linear kernel writing each step's keys at their position) and the same rule
//! (a step attends to the keys stored so far through the per-batch key length).

mod device;
mod kernels;
mod pass;

use ndarray::{Array1, Array2, Array4, ArrayViewD, IxDyn};

use crate::model::llama::rope::Rope;
use crate::model::llama::{check_generate, check_ids, Generation, LlamaConfig, LlamaModel};
use crate::model::{ForwardOutput, GenerateOptions, GenerateStats, ModelError};
use crate::{GpuContext, GpuTensor};

pub use kernels::SOURCES;
use pass::{KvStore, Workspace};

/// One decoder layer's weights on the device.
pub(crate) struct GpuLayer {
    attn_norm: GpuTensor,
    wq: GpuTensor,
    wk: GpuTensor,
    wv: GpuTensor,
    wo: GpuTensor,
    ffn_norm: GpuTensor,
    gate: GpuTensor,
    up: GpuTensor,
    down: GpuTensor,
}

/// The model's weights on one device, ready to run.
pub struct LlamaGpu {
    config: LlamaConfig,
    eos: Option<u32>,
    /// `(vocab, hidden)`: the embedding table, and the output projection when tied.
    embed: GpuTensor,
    lm_head: Option<GpuTensor>,
    out_norm: GpuTensor,
    layers: Vec<GpuLayer>,
    /// `(vocab,)` zeros: the linear kernel's bias, and the RMSNorm kernel's stand-in
    /// for a residual it does not add.
    zeros: GpuTensor,
    /// `(context, D/2, 2)` cos and sin.
    rope: GpuTensor,
}

fn upload(
    ctx: &GpuContext,
    arg: &'static str,
    data: &[f32],
    shape: &[usize],
) -> Result<GpuTensor, ModelError> {
    let view = ArrayViewD::from_shape(IxDyn(shape), data)
        .map_err(|e| ModelError::format("llama weights", format!("{arg}: {e}")))?;
    Ok(GpuTensor::upload(ctx, arg, view)?)
}

fn read_error(e: ndarray::ShapeError) -> ModelError {
    ModelError::format("llama gpu readback", e.to_string())
}

impl LlamaGpu {
    pub(crate) fn upload(ctx: &GpuContext, m: &LlamaModel) -> Result<Self, ModelError> {
        let c = *m.config();
        let w = m.weights();
        let (h, q, kv, f) = (c.hidden, c.q_width(), c.kv_width(), c.intermediate);
        let mut layers = Vec::with_capacity(c.layers);
        for l in &w.layers {
            layers.push(GpuLayer {
                attn_norm: upload(ctx, "attn_norm.weight", &l.attn_norm, &[h])?,
                wq: upload(ctx, "attn_q.weight", &l.wq, &[q, h])?,
                wk: upload(ctx, "attn_k.weight", &l.wk, &[kv, h])?,
                wv: upload(ctx, "attn_v.weight", &l.wv, &[kv, h])?,
                wo: upload(ctx, "attn_output.weight", &l.wo, &[h, q])?,
                ffn_norm: upload(ctx, "ffn_norm.weight", &l.ffn_norm, &[h])?,
                gate: upload(ctx, "ffn_gate.weight", &l.gate, &[f, h])?,
                up: upload(ctx, "ffn_up.weight", &l.up, &[f, h])?,
                down: upload(ctx, "ffn_down.weight", &l.down, &[h, f])?,
            });
        }
        let table = Rope::new(c.head_dim, c.rope_theta).table(c.context);
        Ok(Self {
            config: c,
            eos: m.eos(),
            embed: upload(ctx, "token_embd.weight", &w.embed, &[c.vocab, h])?,
            lm_head: w
                .lm_head
                .as_ref()
                .map(|o| upload(ctx, "output.weight", o, &[c.vocab, h]))
                .transpose()?,
            out_norm: upload(ctx, "output_norm.weight", &w.out_norm, &[h])?,
            layers,
            zeros: GpuTensor::empty(ctx, &[c.vocab.max(f).max(h).max(q)])?,
            rope: upload(ctx, "rope", &table, &[c.context, c.head_dim / 2, 2])?,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The forward pass on the GPU: one submission per layer for the projections and
    /// one for attention, one readback at the end.
    ///
    /// # Errors
    /// [`ModelError::Input`] for an empty or too long sequence or an id outside the
    /// vocabulary; [`ModelError::Attention`] when the device fails.
    pub async fn forward(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        let c = &self.config;
        check_ids(c, ids)?;
        let l = ids.len();
        let ws = Workspace::new(ctx, self, l)?;
        let mut kv = KvStore::new(ctx, self, l)?;
        let weights = if attention {
            let shape = [1, c.heads, l, l];
            Some(
                (0..c.layers)
                    .map(|_| GpuTensor::empty(ctx, &shape))
                    .collect::<Result<Vec<_>, _>>()?,
            )
        } else {
            None
        };
        pass::run(ctx, self, &ws, &mut kv, ids, weights.as_deref()).await?;
        let mut ranges = vec![
            (ws.logits.buffer(), 0, c.vocab as u64 * 4),
            (ws.xn.buffer(), 0, ws.xn.len() as u64 * 4),
        ];
        for w in weights.iter().flatten() {
            ranges.push((w.buffer(), 0, w.len() as u64 * 4));
        }
        let mut data = device::read_ranges(ctx, &ranges).await?.into_iter();
        let logits = Array1::from(data.next().unwrap_or_default());
        let hidden = Array2::from_shape_vec((l, c.hidden), data.next().unwrap_or_default())
            .map_err(read_error)?;
        let attention = if attention {
            let all: Vec<f32> = data.flatten().collect();
            Some(Array4::from_shape_vec((c.layers, c.heads, l, l), all).map_err(read_error)?)
        } else {
            None
        };
        Ok(ForwardOutput {
            attention,
            hidden,
            logits: Some(logits),
        })
    }

    /// Greedy or sampled generation on the GPU; `on_token` sees each new token as it
    /// comes. With `use_cache`, keys and values stay on the device and each new token is
    /// one pass of one token; without, every token recomputes the whole sequence. The
    /// stop rules are those of [`LlamaModel::generate_cpu`].
    ///
    /// # Errors
    /// As [`LlamaModel::generate_cpu`]; [`ModelError::Attention`] when the device fails.
    pub async fn generate(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        check_generate(&self.config, prompt, opts)?;
        let mut run = Generation::new(self.eos, prompt, opts);
        if run.done() {
            return Ok(run.finish());
        }
        if opts.use_cache {
            let mut kv = KvStore::new(ctx, self, prompt.len() + opts.max_new_tokens)?;
            let ws = Workspace::new(ctx, self, prompt.len())?;
            let mut logits = self.logits(ctx, &ws, &mut kv, prompt).await?;
            let step = Workspace::new(ctx, self, 1)?;
            while let Some(t) = run.accept(&logits, on_token) {
                logits = self.logits(ctx, &step, &mut kv, &[t]).await?;
            }
        } else {
            loop {
                let seq = run.sequence();
                let mut kv = KvStore::new(ctx, self, seq.len())?;
                let ws = Workspace::new(ctx, self, seq.len())?;
                let logits = self.logits(ctx, &ws, &mut kv, &seq).await?;
                if run.accept(&logits, on_token).is_none() {
                    break;
                }
            }
        }
        Ok(run.finish())
    }

    /// One pass and the readback of its last logits.
    async fn logits(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        kv: &mut KvStore,
        ids: &[u32],
    ) -> Result<Vec<f32>, ModelError> {
        pass::run(ctx, self, ws, kv, ids, None).await?;
        let bytes = self.config.vocab as u64 * 4;
        let data = device::read_ranges(ctx, &[(ws.logits.buffer(), 0, bytes)]).await?;
        Ok(data.into_iter().next().unwrap_or_default())
    }
}
