//! The model's hyper-parameters and its weights in host memory, read from a GGUF file by
//! the names llama.cpp gives them: as stored ([`LlamaTensors`], what the GPU path uploads
//! and decodes block by block) and dequantized to f32 ([`LlamaWeights`], what the CPU
//! path reads, made from the stored tensors when first asked for).
//!
//! Every matrix is row-major `(out, in)`: GGUF lists dimensions innermost first, so a
//! tensor of dims `[in, out]` is `out` rows of `in` values, the layout `y = x Wᵀ` wants.
//! The q and k rows keep llama.cpp's order, which pairs adjacent elements of each head
//! for RoPE (see `rope.rs`).

use crate::model::llama::gguf::{Gguf, Value};
use crate::model::llama::quant::{self, GgmlType};
use crate::model::ModelError;

/// The hyper-parameters of a llama-family model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlamaConfig {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub context: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
}

/// One decoder layer's weights.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    /// `(hidden,)`.
    pub attn_norm: Vec<f32>,
    /// `(heads * head_dim, hidden)`, rows in llama.cpp's RoPE order.
    pub wq: Vec<f32>,
    /// `(kv_heads * head_dim, hidden)`, rows in llama.cpp's RoPE order.
    pub wk: Vec<f32>,
    /// `(kv_heads * head_dim, hidden)`.
    pub wv: Vec<f32>,
    /// `(hidden, heads * head_dim)`.
    pub wo: Vec<f32>,
    /// `(hidden,)`.
    pub ffn_norm: Vec<f32>,
    /// `(intermediate, hidden)`.
    pub gate: Vec<f32>,
    /// `(intermediate, hidden)`.
    pub up: Vec<f32>,
    /// `(hidden, intermediate)`.
    pub down: Vec<f32>,
}

/// All the weights.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaWeights {
    /// `(vocab, hidden)`.
    pub embed: Vec<f32>,
    pub layers: Vec<LayerWeights>,
    /// `(hidden,)`.
    pub out_norm: Vec<f32>,
    /// `(vocab, hidden)`; `None` when the output shares the embedding (tied).
    pub lm_head: Option<Vec<f32>>,
}

impl LlamaConfig {
    /// Query width `heads * head_dim`.
    pub fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Key/value width `kv_heads * head_dim`.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Checks that the sizes make a model the forward passes can run.
    ///
    /// # Errors
    /// [`ModelError::Format`] naming the first bad size.
    pub fn check(&self) -> Result<(), ModelError> {
        let bad = |d: String| Err(ModelError::format("llama config", d));
        let sizes = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate", self.intermediate),
            ("vocab", self.vocab),
            ("context", self.context),
        ];
        if let Some((n, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{n} is 0"));
        }
        // Far above any real llama; keeps every product below in range.
        if let Some((n, v)) = sizes.iter().find(|(_, v)| *v > 1 << 20) {
            return bad(format!("{n} = {v} is implausibly large"));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} query heads are not a multiple of {} key/value heads",
                self.heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} is odd; RoPE rotates pairs",
                self.head_dim
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!(
                "rms eps {} is not a finite non-negative number",
                self.rms_eps
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("rope theta {} is not positive", self.rope_theta));
        }
        Ok(())
    }

    /// Reads the `llama.*` keys of `g`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an architecture other than llama;
    /// [`ModelError::Format`] for a missing or bad key.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self, ModelError> {
        let arch = g
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::format("GGUF", "general.architecture is missing"))?;
        if arch != "llama" {
            return Err(ModelError::Unsupported(format!(
                "architecture {arch}; this crate runs llama"
            )));
        }
        let int = |key: &str| -> Result<usize, ModelError> {
            g.get(key)
                .and_then(Value::as_u64)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| {
                    ModelError::format("GGUF", format!("{key} is missing or not a count"))
                })
        };
        let float = |key: &str| -> Result<f64, ModelError> {
            g.get(key).and_then(Value::as_f64).ok_or_else(|| {
                ModelError::format("GGUF", format!("{key} is missing or not a number"))
            })
        };
        let hidden = int("llama.embedding_length")?;
        let heads = int("llama.attention.head_count")?;
        let kv_heads = match g.get("llama.attention.head_count_kv") {
            None => heads,
            Some(_) => int("llama.attention.head_count_kv")?,
        };
        let head_dim = match g.get("llama.rope.dimension_count") {
            None if heads > 0 => hidden / heads,
            _ => int("llama.rope.dimension_count")?,
        };
        let vocab = match g.get("llama.vocab_size") {
            Some(_) => int("llama.vocab_size")?,
            None => g
                .get("tokenizer.ggml.tokens")
                .and_then(Value::as_array)
                .map_or(0, <[Value]>::len),
        };
        let config = Self {
            layers: int("llama.block_count")?,
            hidden,
            heads,
            kv_heads,
            head_dim,
            intermediate: int("llama.feed_forward_length")?,
            vocab,
            context: int("llama.context_length")?,
            rms_eps: float("llama.attention.layer_norm_rms_epsilon")?,
            rope_theta: match g.get("llama.rope.freq_base") {
                None => 10_000.0,
                Some(_) => float("llama.rope.freq_base")?,
            },
        };
        config.check()?;
        if head_dim * heads != hidden {
            // Not needed by the math, but every llama this reader knows has it; a
            // mismatch more likely means a misread file.
            return Err(ModelError::format(
                "llama config",
                format!("{heads} heads of {head_dim} do not make the hidden width {hidden}"),
            ));
        }
        Ok(config)
    }
}

/// One tensor as the file stores it: `rows` rows of `cols` elements of type `ty`
/// (row-major, GGUF's innermost dimension being `cols`), in `bytes`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTensor {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: Vec<u8>,
}

impl RawTensor {
    /// An F32 tensor of `values`, `rows` rows.
    pub fn from_f32(rows: usize, values: &[f32]) -> Self {
        Self {
            ty: GgmlType::F32,
            rows,
            cols: values.len().checked_div(rows).unwrap_or(0),
            bytes: bytemuck::cast_slice(values).to_vec(),
        }
    }

    /// The values as f32, dequantized as ggml defines the type.
    pub fn dequantize(&self) -> Vec<f32> {
        quant::dequantize(self.ty, &self.bytes)
    }
}

/// One decoder layer's tensors as stored; the shapes of [`LayerWeights`].
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTensors {
    pub attn_norm: RawTensor,
    pub wq: RawTensor,
    pub wk: RawTensor,
    pub wv: RawTensor,
    pub wo: RawTensor,
    pub ffn_norm: RawTensor,
    pub gate: RawTensor,
    pub up: RawTensor,
    pub down: RawTensor,
}

/// Every tensor as stored; the shapes of [`LlamaWeights`].
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaTensors {
    pub embed: RawTensor,
    pub layers: Vec<LayerTensors>,
    pub out_norm: RawTensor,
    pub lm_head: Option<RawTensor>,
}

impl LlamaTensors {
    /// Reads every tensor of a model of `c`'s sizes, checking each one's dims and type.
    ///
    /// # Errors
    /// [`ModelError::Format`] for a missing tensor or one of the wrong shape;
    /// [`ModelError::Unsupported`] naming a tensor of a type this crate does not read.
    pub fn from_gguf(g: &Gguf<'_>, c: &LlamaConfig) -> Result<Self, ModelError> {
        let (h, q, kv, f) = (c.hidden, c.q_width(), c.kv_width(), c.intermediate);
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let t = |suffix: &str, dims: &[usize]| raw(g, &format!("blk.{i}.{suffix}"), dims);
            layers.push(LayerTensors {
                attn_norm: t("attn_norm.weight", &[h])?,
                wq: t("attn_q.weight", &[h, q])?,
                wk: t("attn_k.weight", &[h, kv])?,
                wv: t("attn_v.weight", &[h, kv])?,
                wo: t("attn_output.weight", &[q, h])?,
                ffn_norm: t("ffn_norm.weight", &[h])?,
                gate: t("ffn_gate.weight", &[h, f])?,
                up: t("ffn_up.weight", &[h, f])?,
                down: t("ffn_down.weight", &[f, h])?,
            });
        }
        Ok(Self {
            embed: raw(g, "token_embd.weight", &[h, c.vocab])?,
            layers,
            out_norm: raw(g, "output_norm.weight", &[h])?,
            lm_head: match g.tensor("output.weight") {
                None => None,
                Some(_) => Some(raw(g, "output.weight", &[h, c.vocab])?),
            },
        })
    }

    /// F32 tensors of `w` (a model built from parts).
    pub fn from_weights(w: &LlamaWeights) -> Self {
        let vec = |v: &[f32]| RawTensor::from_f32(1, v);
        let mat =
            |v: &[f32], cols: usize| RawTensor::from_f32(v.len().checked_div(cols).unwrap_or(0), v);
        let h = w.out_norm.len();
        Self {
            embed: mat(&w.embed, h),
            layers: w
                .layers
                .iter()
                .map(|l| {
                    let q = l.wo.len().checked_div(h).unwrap_or(0);
                    let f = l.down.len().checked_div(h).unwrap_or(0);
                    LayerTensors {
                        attn_norm: vec(&l.attn_norm),
                        wq: mat(&l.wq, h),
                        wk: mat(&l.wk, h),
                        wv: mat(&l.wv, h),
                        wo: mat(&l.wo, q),
                        ffn_norm: vec(&l.ffn_norm),
                        gate: mat(&l.gate, h),
                        up: mat(&l.up, h),
                        down: mat(&l.down, f),
                    }
                })
                .collect(),
            out_norm: vec(&w.out_norm),
            lm_head: w.lm_head.as_ref().map(|o| mat(o, h)),
        }
    }

    /// Every tensor dequantized to f32.
    pub fn dequantize(&self) -> LlamaWeights {
        LlamaWeights {
            embed: self.embed.dequantize(),
            layers: self
                .layers
                .iter()
                .map(|l| LayerWeights {
                    attn_norm: l.attn_norm.dequantize(),
                    wq: l.wq.dequantize(),
                    wk: l.wk.dequantize(),
                    wv: l.wv.dequantize(),
                    wo: l.wo.dequantize(),
                    ffn_norm: l.ffn_norm.dequantize(),
                    gate: l.gate.dequantize(),
                    up: l.up.dequantize(),
                    down: l.down.dequantize(),
                })
                .collect(),
            out_norm: self.out_norm.dequantize(),
            lm_head: self.lm_head.as_ref().map(RawTensor::dequantize),
        }
    }

    /// Bytes of every tensor as stored.
    pub fn bytes(&self) -> u64 {
        let layer = |l: &LayerTensors| {
            [
                &l.attn_norm,
                &l.wq,
                &l.wk,
                &l.wv,
                &l.wo,
                &l.ffn_norm,
                &l.gate,
                &l.up,
                &l.down,
            ]
            .iter()
            .map(|t| t.bytes.len() as u64)
            .sum::<u64>()
        };
        let own = [
            Some(&self.embed),
            Some(&self.out_norm),
            self.lm_head.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|t| t.bytes.len() as u64)
        .sum::<u64>();
        own + self.layers.iter().map(layer).sum::<u64>()
    }
}

/// Reads one tensor as stored, checking its dims (innermost first) against `want` and
/// that its bytes are whole blocks of a type this crate reads.
fn raw(g: &Gguf<'_>, name: &str, want: &[usize]) -> Result<RawTensor, ModelError> {
    let t = g
        .tensor(name)
        .ok_or_else(|| ModelError::format("GGUF", format!("tensor {name} is missing")))?;
    check_dims(t, name, want)?;
    let bytes = g.tensor_data(t)?.to_vec();
    let cols = want.first().copied().unwrap_or(1);
    Ok(RawTensor {
        ty: t.ty,
        rows: want.iter().skip(1).product(),
        cols,
        bytes,
    })
}

fn check_dims(
    t: &crate::model::llama::gguf::TensorInfo,
    name: &str,
    want: &[usize],
) -> Result<(), ModelError> {
    let dims: Vec<u64> = want.iter().map(|&d| d as u64).collect();
    // ggml pads a shape with trailing 1s; ignore them.
    let mut got = t.dims.clone();
    while got.len() > dims.len() && got.last() == Some(&1) {
        got.pop();
    }
    if got != dims {
        return Err(ModelError::format(
            "GGUF",
            format!("tensor {name} has dims {:?}, expected {dims:?}", t.dims),
        ));
    }
    Ok(())
}

/// Reads one tensor, checking its dims (innermost first) against `want`.
impl LlamaWeights {
    /// Reads every weight of a model of `c`'s sizes.
    ///
    /// # Errors
    /// [`ModelError::Format`] for a missing tensor or one of the wrong shape;
    /// [`ModelError::Unsupported`] naming a tensor of a type this crate does not read.
    pub fn from_gguf(g: &Gguf<'_>, c: &LlamaConfig) -> Result<Self, ModelError> {
        Ok(LlamaTensors::from_gguf(g, c)?.dequantize())
    }

    /// Checks every tensor's length against `c`.
    ///
    /// # Errors
    /// [`ModelError::Format`] naming the first tensor of the wrong size.
    pub fn check(&self, c: &LlamaConfig) -> Result<(), ModelError> {
        let (h, q, kv, f) = (c.hidden, c.q_width(), c.kv_width(), c.intermediate);
        let len = |name: String, v: &[f32], want: usize| {
            if v.len() == want {
                Ok(())
            } else {
                Err(ModelError::format(
                    "llama weights",
                    format!("{name} holds {} values, expected {want}", v.len()),
                ))
            }
        };
        if self.layers.len() != c.layers {
            return Err(ModelError::format(
                "llama weights",
                format!("{} layers, the config says {}", self.layers.len(), c.layers),
            ));
        }
        len("embed".into(), &self.embed, c.vocab * h)?;
        len("out_norm".into(), &self.out_norm, h)?;
        if let Some(w) = &self.lm_head {
            len("lm_head".into(), w, c.vocab * h)?;
        }
        for (i, l) in self.layers.iter().enumerate() {
            let n = |s: &str| format!("layer {i} {s}");
            len(n("attn_norm"), &l.attn_norm, h)?;
            len(n("wq"), &l.wq, q * h)?;
            len(n("wk"), &l.wk, kv * h)?;
            len(n("wv"), &l.wv, kv * h)?;
            len(n("wo"), &l.wo, h * q)?;
            len(n("ffn_norm"), &l.ffn_norm, h)?;
            len(n("gate"), &l.gate, f * h)?;
            len(n("up"), &l.up, f * h)?;
            len(n("down"), &l.down, h * f)?;
        }
        Ok(())
    }

    /// The output projection `(vocab, hidden)`: its own or the embedding's.
    pub fn output(&self) -> &[f32] {
        self.lm_head.as_deref().unwrap_or(&self.embed)
    }
}
