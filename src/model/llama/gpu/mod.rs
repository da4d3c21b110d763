//! The model on the GPU: every weight matrix uploaded once as its GGUF blocks (one copy;
//! a tied embedding table serves both the gather and the logits), the forward pass of
//! `pass.rs` recorded into one command encoder and submitted once, and generation with a
//! KV store on the device, so that each new token after the prompt is one submission of
//! one token's pass and one readback of its logits.
//!
//! The crate's [`KvCache`](crate::KvCache) is made for [`MhaGpuWeights`](crate::MhaGpuWeights)
//! and projects x itself; here RoPE must rotate the keys between the projection and the
//! store, so [`pass::KvStore`] keeps the same layout (`(1, kv_heads, capacity, D)` per
//! layer, the projection writing each step's keys at their position) and the same rule
//! (a step attends to the keys stored so far through the per-batch key length).

mod pass;

use ndarray::{Array1, Array2, Array4, ArrayViewD, IxDyn};

use crate::model::llama::gguf::GgmlType;
use crate::model::llama::rope::Rope;
use crate::model::llama::weights::RawTensor;
use crate::model::llama::{check_generate, check_ids, Generation, LlamaConfig, LlamaModel};
use crate::model::ops::{read_ranges, QuantMatrix};
use crate::model::{ForwardOutput, GenerateOptions, GenerateStats, ModelError};
use crate::{GpuContext, GpuTensor};

use pass::{KvStore, Workspace};

/// One decoder layer's weights on the device.
pub(crate) struct GpuLayer {
    attn_norm: GpuTensor,
    wq: QuantMatrix,
    wk: QuantMatrix,
    wv: QuantMatrix,
    wo: QuantMatrix,
    ffn_norm: GpuTensor,
    gate: QuantMatrix,
    up: QuantMatrix,
    down: QuantMatrix,
}

/// The model's weights on one device, ready to run.
pub struct LlamaGpu {
    config: LlamaConfig,
    eos: Option<u32>,
    /// `(vocab, hidden)`: the embedding table, and the output projection when tied.
    embed: QuantMatrix,
    lm_head: Option<QuantMatrix>,
    out_norm: GpuTensor,
    layers: Vec<GpuLayer>,
    /// The RMSNorm kernel's stand-in for a residual it does not add.
    zeros: GpuTensor,
    /// `(context, D/2, 2)` cos and sin.
    rope: GpuTensor,
    /// Every weight type of the matrices, for preparing the pipelines.
    types: Vec<GgmlType>,
}

/// A vector (a norm's weight) as f32 on the device.
fn upload_vector(
    ctx: &GpuContext,
    arg: &'static str,
    t: &RawTensor,
) -> Result<GpuTensor, ModelError> {
    let data = t.dequantize();
    upload_f32(ctx, arg, &data, &[data.len()])
}

fn upload_f32(
    ctx: &GpuContext,
    arg: &'static str,
    data: &[f32],
    shape: &[usize],
) -> Result<GpuTensor, ModelError> {
    let view = ArrayViewD::from_shape(IxDyn(shape), data)
        .map_err(|e| ModelError::format("llama weights", format!("{arg}: {e}")))?;
    Ok(GpuTensor::upload(ctx, arg, view)?)
}

fn upload_matrix(ctx: &GpuContext, label: &str, t: &RawTensor) -> Result<QuantMatrix, ModelError> {
    Ok(QuantMatrix::upload(
        ctx,
        label,
        t.ty,
        (t.rows, t.cols),
        &t.bytes,
    )?)
}

fn read_error(e: ndarray::ShapeError) -> ModelError {
    ModelError::format("llama gpu readback", e.to_string())
}

impl LlamaGpu {
    pub(crate) fn upload(ctx: &GpuContext, m: &LlamaModel) -> Result<Self, ModelError> {
        let c = *m.config();
        let t = m.tensors();
        let mut layers = Vec::with_capacity(c.layers);
        for (i, l) in t.layers.iter().enumerate() {
            let name = |s: &str| format!("blk.{i}.{s}");
            layers.push(GpuLayer {
                attn_norm: upload_vector(ctx, "attn_norm.weight", &l.attn_norm)?,
                wq: upload_matrix(ctx, &name("attn_q.weight"), &l.wq)?,
                wk: upload_matrix(ctx, &name("attn_k.weight"), &l.wk)?,
                wv: upload_matrix(ctx, &name("attn_v.weight"), &l.wv)?,
                wo: upload_matrix(ctx, &name("attn_output.weight"), &l.wo)?,
                ffn_norm: upload_vector(ctx, "ffn_norm.weight", &l.ffn_norm)?,
                gate: upload_matrix(ctx, &name("ffn_gate.weight"), &l.gate)?,
                up: upload_matrix(ctx, &name("ffn_up.weight"), &l.up)?,
                down: upload_matrix(ctx, &name("ffn_down.weight"), &l.down)?,
            });
        }
        let table = Rope::new(c.head_dim, c.rope_theta).table(c.context);
        let embed = upload_matrix(ctx, "token_embd.weight", &t.embed)?;
        let lm_head = t
            .lm_head
            .as_ref()
            .map(|o| upload_matrix(ctx, "output.weight", o))
            .transpose()?;
        let mut types = vec![embed.ty];
        types.extend(lm_head.iter().map(|w| w.ty));
        for l in &layers {
            types.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down].map(|w| w.ty));
        }
        types.sort_by_key(|t| t.0);
        types.dedup();
        Ok(Self {
            config: c,
            eos: m.eos(),
            embed,
            lm_head,
            out_norm: upload_vector(ctx, "output_norm.weight", &t.out_norm)?,
            layers,
            zeros: GpuTensor::empty(ctx, &[c.hidden])?,
            rope: upload_f32(ctx, "rope", &table, &[c.context, c.head_dim / 2, 2])?,
            types,
        })
    }

    /// Device bytes the weights occupy (matrices in their GGUF blocks, norms as f32), the
    /// RoPE table and scratch excluded; compare with [`crate::model::llama::LlamaTensors::bytes`].
    pub fn weight_bytes(&self) -> u64 {
        let norms = |t: &GpuTensor| t.len() as u64 * 4;
        let mut total = self.embed.device_bytes() + norms(&self.out_norm);
        total += self.lm_head.as_ref().map_or(0, QuantMatrix::device_bytes);
        for l in &self.layers {
            total += norms(&l.attn_norm) + norms(&l.ffn_norm);
            total += [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                .iter()
                .map(|w| w.device_bytes())
                .sum::<u64>();
        }
        total
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The forward pass on the GPU: one submission, one readback at the end.
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
        let mut data = read_ranges(ctx, &ranges).await?.into_iter();
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
        let data = read_ranges(ctx, &[(ws.logits.buffer(), 0, bytes)]).await?;
        Ok(data.into_iter().next().unwrap_or_default())
    }
}
