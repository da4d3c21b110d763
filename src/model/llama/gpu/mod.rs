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

use crate::model::llama::quant::GgmlType;
use crate::model::llama::rope::Rope;
use crate::model::llama::weights::RawTensor;
use crate::model::llama::{check_generate, check_ids, Generation, LlamaConfig, LlamaModel};
use crate::model::ops::{
    read_ranges, EpiKind, NormRows, ProductShape, QuantMatrix, QuantVariant, StageMarks,
};
use crate::model::{
    ForwardOutput, GenerateOptions, GenerateStats, HeadPatch, LayerInputs, ModelError, StageTimes,
};
use crate::{GpuContext, GpuTensor};

use pass::{KvStore, Workspace};

/// One decoder layer's weights on the device.
pub(crate) struct GpuLayer {
    attn_norm: GpuTensor,
    /// `[Wq; Wk; Wv]` in runs of one weight type (one matrix when all three share one),
    /// each with the first column of `[q | k | v]` its rows produce: one product per run.
    qkv: Vec<(usize, QuantMatrix)>,
    wo: QuantMatrix,
    ffn_norm: GpuTensor,
    gate_up: GateUp,
    down: QuantMatrix,
}

/// The FFN's gate and up projections.
pub(crate) enum GateUp {
    /// One matrix whose rows interleave them (row 2j gate j, 2j + 1 up j), for the
    /// product that ends in SwiGLU; when both have one weight type.
    Interleaved(QuantMatrix),
    /// Two products and the SiLU·mul kernel; when their types differ.
    Split { gate: QuantMatrix, up: QuantMatrix },
}

impl GpuLayer {
    fn matrices(&self) -> Vec<&QuantMatrix> {
        let mut all: Vec<_> = self.qkv.iter().map(|(_, w)| w).collect();
        all.extend([&self.wo, &self.down]);
        match &self.gate_up {
            GateUp::Interleaved(w) => all.push(w),
            GateUp::Split { gate, up } => all.extend([gate, up]),
        }
        all
    }

    /// The kernel variants this layer's products take: W's type, the variant, the width
    /// of x each reads and whether W is in pages.
    fn variants(&self) -> Vec<Variant> {
        let normed = |epi| QuantVariant { norm: true, epi };
        let add = QuantVariant {
            norm: false,
            epi: EpiKind::Add,
        };
        let mut v: Vec<_> = self
            .qkv
            .iter()
            .map(|(_, w)| variant(w, normed(EpiKind::Qkv)))
            .collect();
        v.extend([variant(&self.wo, add), variant(&self.down, add)]);
        match &self.gate_up {
            GateUp::Interleaved(w) => v.push(variant(w, normed(EpiKind::SwiGlu))),
            GateUp::Split { gate, up } => {
                v.extend([gate, up].map(|w| variant(w, normed(EpiKind::Store))))
            }
        }
        v
    }
}

/// A product's kernel variant: W's type, the variant, the width of x, W in pages, W in
/// planes.
type Variant = (GgmlType, QuantVariant, usize, bool, bool);

fn variant(w: &QuantMatrix, var: QuantVariant) -> Variant {
    (w.ty, var, w.cols, w.pages.is_some(), w.planes)
}

/// Rows of `parts` (tensors of one type and width) one after another.
fn stack_rows(parts: &[&RawTensor]) -> RawTensor {
    RawTensor {
        ty: parts[0].ty,
        rows: parts.iter().map(|t| t.rows).sum(),
        cols: parts[0].cols,
        bytes: parts.iter().flat_map(|t| t.bytes.iter().copied()).collect(),
    }
}

/// `a`'s and `b`'s rows interleaved (a's row j at 2j, b's at 2j + 1); one type, one
/// shape. GGUF rows are whole blocks, so a row is `bytes / rows` bytes.
fn interleave_rows(a: &RawTensor, b: &RawTensor) -> RawTensor {
    let row = a.bytes.len() / a.rows.max(1);
    let mut bytes = Vec::with_capacity(a.bytes.len() + b.bytes.len());
    for (ra, rb) in a.bytes.chunks_exact(row).zip(b.bytes.chunks_exact(row)) {
        bytes.extend_from_slice(ra);
        bytes.extend_from_slice(rb);
    }
    RawTensor {
        ty: a.ty,
        rows: a.rows + b.rows,
        cols: a.cols,
        bytes,
    }
}

/// q, k and v in runs of one type, each run with its first column of `[q | k | v]`.
fn upload_qkv(
    ctx: &GpuContext,
    layer: usize,
    [q, k, v]: [&RawTensor; 3],
) -> Result<Vec<(usize, QuantMatrix)>, ModelError> {
    let mut runs: Vec<(usize, Vec<&RawTensor>)> = Vec::new();
    let mut col = 0;
    for t in [q, k, v] {
        match runs.last_mut() {
            Some((_, run)) if run[0].ty == t.ty => run.push(t),
            _ => runs.push((col, vec![t])),
        }
        col += t.rows;
    }
    runs.into_iter()
        .map(|(col0, run)| {
            let label = format!("blk.{layer}.attn_qkv.weight (from column {col0})");
            Ok((col0, upload_matrix(ctx, &label, &stack_rows(&run))?))
        })
        .collect()
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
    /// The layers' norm weights again, in a uniform buffer (layer i's attention norm
    /// at slot 2i, its FFN norm at 2i + 1), for the products that read x from the
    /// uniform copy; `None` for rows too wide for it.
    norm_rows: Option<NormRows>,
    /// Every (weight type, kernel variant, width of x) the layers' products take, for
    /// preparing the pipelines.
    variants: Vec<Variant>,
    /// The logits head's (one row in every pass).
    head_variant: Variant,
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

/// A layer's projection, laid out for the products (in pages where the paged entry
/// reads it).
fn upload_matrix(ctx: &GpuContext, label: &str, t: &RawTensor) -> Result<QuantMatrix, ModelError> {
    Ok(QuantMatrix::upload_for_products(
        ctx,
        label,
        t.ty,
        (t.rows, t.cols),
        &t.bytes,
    )?)
}

/// The token embedding or the logits head, which only the embedding gather and one-row
/// products read (the head can be the same tensor): Q8_0 in planes where the subgroup
/// entry reads it, else rows as stored.
fn upload_table(ctx: &GpuContext, label: &str, t: &RawTensor) -> Result<QuantMatrix, ModelError> {
    Ok(QuantMatrix::upload_table(
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
    /// The products a pass of `rows` tokens records (every layer's over the rows, the
    /// logits head over the last), and for a prompt's pass also the one-row products of
    /// the decoding steps that follow, so that building their pipelines is part of the
    /// prompt's first pass rather than of the first generated token.
    pub(crate) fn products(&self, rows: usize) -> Vec<ProductShape> {
        let shape = |(ty, var, inner, paged, planes), rows| ProductShape {
            ty,
            planes,
            var,
            rows,
            inner,
            paged,
        };
        let mut all = vec![shape(self.head_variant, 1)];
        all.extend(self.variants.iter().map(|&v| shape(v, rows)));
        if rows > 1 {
            all.extend(self.variants.iter().map(|&v| shape(v, 1)));
        }
        all
    }

    pub(crate) fn upload(ctx: &GpuContext, m: &LlamaModel) -> Result<Self, ModelError> {
        let c = *m.config();
        let t = m.tensors();
        let mut layers = Vec::with_capacity(c.layers);
        for (i, l) in t.layers.iter().enumerate() {
            let name = |s: &str| format!("blk.{i}.{s}");
            let gate_up = if l.gate.ty == l.up.ty {
                let both = interleave_rows(&l.gate, &l.up);
                GateUp::Interleaved(upload_matrix(ctx, &name("ffn_gate_up.weight"), &both)?)
            } else {
                GateUp::Split {
                    gate: upload_matrix(ctx, &name("ffn_gate.weight"), &l.gate)?,
                    up: upload_matrix(ctx, &name("ffn_up.weight"), &l.up)?,
                }
            };
            layers.push(GpuLayer {
                attn_norm: upload_vector(ctx, "attn_norm.weight", &l.attn_norm)?,
                qkv: upload_qkv(ctx, i, [&l.wq, &l.wk, &l.wv])?,
                wo: upload_matrix(ctx, &name("attn_output.weight"), &l.wo)?,
                ffn_norm: upload_vector(ctx, "ffn_norm.weight", &l.ffn_norm)?,
                gate_up,
                down: upload_matrix(ctx, &name("ffn_down.weight"), &l.down)?,
            });
        }
        let table = Rope::new(c.head_dim, c.rope_theta).table(c.context);
        let embed = upload_table(ctx, "token_embd.weight", &t.embed)?;
        let lm_head = t
            .lm_head
            .as_ref()
            .map(|o| upload_table(ctx, "output.weight", o))
            .transpose()?;
        let head = lm_head.as_ref().unwrap_or(&embed);
        let head_variant = variant(head, QuantVariant::PLAIN);
        let mut variants = Vec::new();
        for l in &layers {
            for v in l.variants() {
                if !variants.contains(&v) {
                    variants.push(v);
                }
            }
        }
        let norm_weights: Vec<&GpuTensor> = layers
            .iter()
            .flat_map(|l| [&l.attn_norm, &l.ffn_norm])
            .collect();
        let norm_rows = NormRows::new(ctx, &norm_weights)?;
        Ok(Self {
            config: c,
            eos: m.eos(),
            embed,
            lm_head,
            out_norm: upload_vector(ctx, "output_norm.weight", &t.out_norm)?,
            layers,
            zeros: GpuTensor::empty(ctx, &[c.hidden])?,
            rope: upload_f32(ctx, "rope", &table, &[c.context, c.head_dim / 2, 2])?,
            norm_rows,
            variants,
            head_variant,
        })
    }

    /// Device bytes the weights occupy (matrices in their GGUF blocks, norms as f32, the
    /// layers' norms twice: also in the uniform buffer the decoding products read), the
    /// RoPE table and scratch excluded; compare with
    /// [`crate::model::llama::LlamaTensors::bytes`].
    pub fn weight_bytes(&self) -> u64 {
        let norms = |t: &GpuTensor| t.len() as u64 * 4;
        let mut total = self.embed.device_bytes() + norms(&self.out_norm);
        total += self.norm_rows.as_ref().map_or(0, NormRows::bytes);
        total += self.lm_head.as_ref().map_or(0, QuantMatrix::device_bytes);
        for l in &self.layers {
            total += norms(&l.attn_norm) + norms(&l.ffn_norm);
            total += l.matrices().iter().map(|w| w.device_bytes()).sum::<u64>();
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
        let taps = pass::Taps {
            weights: weights.as_deref(),
            ..Default::default()
        };
        pass::run(ctx, self, &ws, &mut kv, ids, taps, None).await?;
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

    /// [`LlamaGpu::forward`] with one head's attention output replaced (see
    /// [`HeadPatch`]); the logits are the last position's.
    ///
    /// # Errors
    /// As [`LlamaModel::forward_reference_patched`]; device failures.
    pub async fn forward_patched(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        let c = &self.config;
        check_ids(c, ids)?;
        patch.check((c.layers, c.heads, c.head_dim), ids.len())?;
        let l = ids.len();
        let ws = Workspace::new(ctx, self, l)?;
        let mut kv = KvStore::new(ctx, self, l)?;
        let out = GpuTensor::from_array(ctx, patch.out.view().into_dyn())?;
        let taps = pass::Taps {
            patch: Some((patch.layer, patch.head, &out)),
            ..Default::default()
        };
        pass::run(ctx, self, &ws, &mut kv, ids, taps, None).await?;
        let ranges = [
            (ws.logits.buffer(), 0, c.vocab as u64 * 4),
            (ws.xn.buffer(), 0, ws.xn.len() as u64 * 4),
        ];
        let mut data = read_ranges(ctx, &ranges).await?.into_iter();
        let logits = Array1::from(data.next().unwrap_or_default());
        let hidden = Array2::from_shape_vec((l, c.hidden), data.next().unwrap_or_default())
            .map_err(read_error)?;
        Ok(ForwardOutput {
            attention: None,
            hidden,
            logits: Some(logits),
        })
    }

    /// Every layer's attention inputs for `ids` from one GPU pass: the queries after RoPE
    /// and the keys and values as the KV cache holds them (grouped: `kv_heads` heads);
    /// the attention is causal, at scale `1/√D`.
    ///
    /// # Errors
    /// As [`LlamaGpu::forward`].
    pub async fn attention_inputs(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
    ) -> Result<Vec<LayerInputs>, ModelError> {
        let c = &self.config;
        check_ids(c, ids)?;
        let l = ids.len();
        let ws = Workspace::new(ctx, self, l)?;
        let mut kv = KvStore::new(ctx, self, l)?;
        let queries = (0..c.layers)
            .map(|_| GpuTensor::empty(ctx, &[1, c.heads, l, c.head_dim]))
            .collect::<Result<Vec<_>, _>>()?;
        let taps = pass::Taps {
            queries: Some(&queries),
            ..Default::default()
        };
        pass::run(ctx, self, &ws, &mut kv, ids, taps, None).await?;
        let mut ranges = Vec::with_capacity(3 * c.layers);
        for ((q, k), v) in queries.iter().zip(&kv.k).zip(&kv.v) {
            for t in [q, k, v] {
                ranges.push((t.buffer(), 0, t.len() as u64 * 4));
            }
        }
        let mut data = read_ranges(ctx, &ranges).await?.into_iter();
        let mut next = |heads: usize| {
            Array4::from_shape_vec((1, heads, l, c.head_dim), data.next().unwrap_or_default())
                .map_err(read_error)
        };
        (0..c.layers)
            .map(|_| {
                Ok(LayerInputs {
                    q: next(c.heads)?,
                    k: next(c.kv_heads)?,
                    v: next(c.kv_heads)?,
                })
            })
            .collect()
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
        self.generate_marked(ctx, prompt, opts, on_token, None)
            .await
    }

    /// [`LlamaGpu::generate`], with the device time of every generated token's pass
    /// split into its stages by timestamp queries: per stage (embedding, q/k/v
    /// projection, attention, output projection, gate/up projection, down projection,
    /// final norm + logits head, each summed over layers), the mean over the passes after
    /// the prompt's, in seconds. The tokens are those of `generate`; each pass carries
    /// 3 + 5 per layer more timestamps (empty compute passes), which the device's total
    /// includes. The prompt's pass, which builds the pipelines, is not in the split.
    ///
    /// # Errors
    /// As [`LlamaGpu::generate`]; [`ModelError::Unsupported`] when the device has no
    /// timestamp queries.
    pub async fn generate_with_stages(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<(GenerateStats, StageTimes), ModelError> {
        if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(ModelError::Unsupported(format!(
                "timing stages needs timestamp queries, which adapter {:?} does not offer",
                ctx.adapter_info().name
            )));
        }
        let mut split = StepStages::default();
        let stats = self
            .generate_marked(ctx, prompt, opts, on_token, Some(&mut split))
            .await?;
        Ok((stats, split.mean()))
    }

    async fn generate_marked(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
        mut split: Option<&mut StepStages>,
    ) -> Result<GenerateStats, ModelError> {
        check_generate(&self.config, prompt, opts)?;
        let mut run = Generation::new(self.eos, prompt, opts);
        if run.done() {
            return Ok(run.finish());
        }
        if opts.use_cache {
            let mut kv = KvStore::new(ctx, self, prompt.len() + opts.max_new_tokens)?;
            let ws = Workspace::new(ctx, self, prompt.len())?;
            let mut logits = self.logits(ctx, &ws, &mut kv, prompt, None).await?;
            let step = Workspace::new(ctx, self, 1)?;
            while let Some(t) = run.accept(&logits, on_token) {
                let split = split.as_deref_mut();
                logits = self.logits(ctx, &step, &mut kv, &[t], split).await?;
            }
        } else {
            let mut first = true;
            loop {
                let seq = run.sequence();
                let mut kv = KvStore::new(ctx, self, seq.len())?;
                let ws = Workspace::new(ctx, self, seq.len())?;
                let timed = if first { None } else { split.as_deref_mut() };
                first = false;
                let logits = self.logits(ctx, &ws, &mut kv, &seq, timed).await?;
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
        split: Option<&mut StepStages>,
    ) -> Result<Vec<f32>, ModelError> {
        let Some(split) = split else {
            pass::run(ctx, self, ws, kv, ids, pass::Taps::default(), None).await?;
            return self.read_logits(ctx, ws).await;
        };
        let mut marks = StageMarks::new(ctx, pass::marks_per_pass(self))?.ok_or_else(|| {
            ModelError::Unsupported("the device lost its timestamp queries".into())
        })?;
        pass::run(
            ctx,
            self,
            ws,
            kv,
            ids,
            pass::Taps::default(),
            Some(&mut marks),
        )
        .await?;
        let logits = self.read_logits(ctx, ws).await?;
        split.add(&marks.read_ms(ctx).await?);
        Ok(logits)
    }

    async fn read_logits(&self, ctx: &GpuContext, ws: &Workspace) -> Result<Vec<f32>, ModelError> {
        let bytes = self.config.vocab as u64 * 4;
        let data = read_ranges(ctx, &[(ws.logits.buffer(), 0, bytes)]).await?;
        Ok(data.into_iter().next().unwrap_or_default())
    }
}

/// Stage times summed over timed passes, and how many passes were timed.
#[derive(Default)]
struct StepStages {
    sums: StageTimes,
    passes: usize,
}

impl StepStages {
    /// Adds one pass's `(stage, milliseconds)` marks.
    fn add(&mut self, marks: &[(&'static str, f64)]) {
        for &(stage, ms) in marks {
            self.sums.add(stage, ms / 1e3);
        }
        self.passes += 1;
    }

    /// Seconds per stage per timed pass, in [`pass::STAGES`]'s order.
    fn mean(&self) -> StageTimes {
        let mut mean = StageTimes::default();
        for &(stage, seconds) in self.sums.entries() {
            mean.add(stage, seconds / self.passes.max(1) as f64);
        }
        mean
    }
}
