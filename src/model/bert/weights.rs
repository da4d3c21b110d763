//! The encoder's tensors, read from `model.safetensors` by their Hugging Face `BertModel`
//! names (with or without a `bert.` prefix) and checked against the config's sizes.

use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors};

use super::config::BertConfig;
use crate::model::ModelError;

/// A dense layer `y = x Wᵀ + b`, W `(out, in)` as PyTorch stores it.
#[derive(Debug, Clone)]
pub(crate) struct Dense {
    pub w: Array2<f32>,
    pub b: Array1<f32>,
}

/// A LayerNorm's scale and shift.
#[derive(Debug, Clone)]
pub(crate) struct Norm {
    pub w: Array1<f32>,
    pub b: Array1<f32>,
}

/// One encoder layer.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub query: Dense,
    pub key: Dense,
    pub value: Dense,
    pub attn_out: Dense,
    pub attn_norm: Norm,
    pub intermediate: Dense,
    pub output: Dense,
    pub out_norm: Norm,
}

/// Every tensor the forward pass reads.
#[derive(Debug, Clone)]
pub(crate) struct BertWeights {
    pub word: Array2<f32>,
    pub position: Array2<f32>,
    pub token_type: Array2<f32>,
    pub embed_norm: Norm,
    pub layers: Vec<Layer>,
}

/// Reads tensors by name under one prefix, checking dtype and shape.
struct Reader<'a> {
    st: &'a SafeTensors<'a>,
    prefix: &'static str,
}

impl Reader<'_> {
    fn raw(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let full = format!("{}{name}", self.prefix);
        let what = format!("model.safetensors: tensor {full}");
        let t = self
            .st
            .tensor(&full)
            .map_err(|_| ModelError::format(&what, "missing"))?;
        if t.dtype() != Dtype::F32 {
            return Err(ModelError::format(
                &what,
                format!("has dtype {:?}, expected F32", t.dtype()),
            ));
        }
        if t.shape() != shape {
            return Err(ModelError::format(
                &what,
                format!("has shape {:?}, expected {shape:?}", t.shape()),
            ));
        }
        // safetensors stores little-endian data; the bytes need not be 4-aligned.
        Ok(t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Array2<f32>, ModelError> {
        let data = self.raw(name, &[rows, cols])?;
        Array2::from_shape_vec((rows, cols), data)
            .map_err(|e| ModelError::format(name.to_string(), e.to_string()))
    }

    fn vector(&self, name: &str, n: usize) -> Result<Array1<f32>, ModelError> {
        Ok(Array1::from_vec(self.raw(name, &[n])?))
    }

    fn dense(&self, name: &str, out: usize, inp: usize) -> Result<Dense, ModelError> {
        Ok(Dense {
            w: self.matrix(&format!("{name}.weight"), out, inp)?,
            b: self.vector(&format!("{name}.bias"), out)?,
        })
    }

    fn norm(&self, name: &str, n: usize) -> Result<Norm, ModelError> {
        Ok(Norm {
            w: self.vector(&format!("{name}.weight"), n)?,
            b: self.vector(&format!("{name}.bias"), n)?,
        })
    }
}

impl BertWeights {
    /// Parses a safetensors file and reads every tensor the config implies.
    ///
    /// # Errors
    /// [`ModelError::Format`] naming the file or the first tensor that is missing, not
    /// F32, or of the wrong shape.
    pub(crate) fn from_safetensors(bytes: &[u8], c: &BertConfig) -> Result<Self, ModelError> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| ModelError::format("model.safetensors", e.to_string()))?;
        let prefixed = st.tensor("bert.embeddings.word_embeddings.weight").is_ok();
        let r = Reader {
            st: &st,
            prefix: if prefixed { "bert." } else { "" },
        };
        let (h, i) = (c.hidden_size, c.intermediate_size);
        // In file order of a BertModel checkpoint, so the first missing tensor is named.
        let word = r.matrix("embeddings.word_embeddings.weight", c.vocab_size, h)?;
        let position = r.matrix(
            "embeddings.position_embeddings.weight",
            c.max_position_embeddings,
            h,
        )?;
        let token_type = r.matrix(
            "embeddings.token_type_embeddings.weight",
            c.type_vocab_size,
            h,
        )?;
        let embed_norm = r.norm("embeddings.LayerNorm", h)?;
        let layers = (0..c.num_hidden_layers)
            .map(|n| {
                let p = format!("encoder.layer.{n}.");
                Ok(Layer {
                    query: r.dense(&format!("{p}attention.self.query"), h, h)?,
                    key: r.dense(&format!("{p}attention.self.key"), h, h)?,
                    value: r.dense(&format!("{p}attention.self.value"), h, h)?,
                    attn_out: r.dense(&format!("{p}attention.output.dense"), h, h)?,
                    attn_norm: r.norm(&format!("{p}attention.output.LayerNorm"), h)?,
                    intermediate: r.dense(&format!("{p}intermediate.dense"), i, h)?,
                    output: r.dense(&format!("{p}output.dense"), h, i)?,
                    out_norm: r.norm(&format!("{p}output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            word,
            position,
            token_type,
            embed_norm,
            layers,
        })
    }
}
