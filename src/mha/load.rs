//! Weights from a `.safetensors` file holding PyTorch's `nn.MultiheadAttention`
//! `state_dict` names. Tensors may be f32, f16, bf16 or f64; all become f32.

use ndarray::{Array1, Array2, ArrayD, Ix1, Ix2, IxDyn};
use safetensors::{Dtype, SafeTensors};

use crate::error::{AttentionError, Result};
use crate::mha::weights::{MhaDims, MhaWeights, Names, Projections, SEPARATE};

const IN_PROJ: &str = "in_proj_weight";
const IN_BIAS: &str = "in_proj_bias";
const OUT_W: &str = "out_proj.weight";
const OUT_B: &str = "out_proj.bias";

const PACKED: Names = Names {
    q_weight: IN_PROJ,
    k_weight: IN_PROJ,
    v_weight: IN_PROJ,
    q_bias: IN_BIAS,
    k_bias: IN_BIAS,
    v_bias: IN_BIAS,
};

/// One tensor of the file as f32, or `None` when absent.
fn tensor(st: &SafeTensors<'_>, name: &'static str) -> Result<Option<ArrayD<f32>>> {
    let Ok(view) = st.tensor(name) else {
        return Ok(None);
    };
    let data = view.data();
    let values: Vec<f32> = match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b) as f32
            })
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => {
            return Err(AttentionError::shape(
                name,
                format!("dtype {other:?} is not accepted (F32, F16, BF16 or F64 expected)"),
            ))
        }
    };
    ArrayD::from_shape_vec(IxDyn(view.shape()), values)
        .map(Some)
        .map_err(|e| {
            AttentionError::shape(
                name,
                format!("data does not fit shape {:?}: {e}", view.shape()),
            )
        })
}

fn matrix(name: &'static str, a: ArrayD<f32>) -> Result<Array2<f32>> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix2>()
        .map_err(|_| AttentionError::shape(name, format!("expected rank 2, got shape {shape:?}")))
}

fn vector(name: &'static str, a: ArrayD<f32>) -> Result<Array1<f32>> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix1>()
        .map_err(|_| AttentionError::shape(name, format!("expected rank 1, got shape {shape:?}")))
}

fn required(st: &SafeTensors<'_>, name: &'static str, why: &str) -> Result<Array2<f32>> {
    let t = tensor(st, name)?.ok_or_else(|| {
        AttentionError::shape(
            name,
            format!("missing from the weights file ({why}); {}", found(st)),
        )
    })?;
    matrix(name, t)
}

/// The tensor names a file holds, for messages about a missing one (the first 12).
fn found(st: &SafeTensors<'_>) -> String {
    let mut names = st.names();
    names.sort();
    if names.is_empty() {
        return "the file holds no tensors".into();
    }
    let shown: Vec<&str> = names.iter().take(12).map(|n| &n[..]).collect();
    let more = names.len().saturating_sub(shown.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("the file holds {}{tail}", shown.join(", "))
}

fn optional_vector(st: &SafeTensors<'_>, name: &'static str) -> Result<Option<Array1<f32>>> {
    tensor(st, name)?.map(|t| vector(name, t)).transpose()
}

/// Splits a packed `(E + 2·kv)`-row tensor's leading axis into q, k and v parts.
fn split3<T: Clone, D: ndarray::RemoveAxis>(
    a: &ndarray::Array<T, D>,
    e: usize,
    kv: usize,
) -> [ndarray::Array<T, D>; 3] {
    let part =
        |from: usize, to: usize| a.slice_axis(ndarray::Axis(0), (from..to).into()).to_owned();
    [part(0, e), part(e, e + kv), part(e + kv, e + 2 * kv)]
}

impl MhaWeights {
    /// Reads the layer from the bytes of a `.safetensors` file with PyTorch's names:
    /// `in_proj_weight` `(E + 2·N·E/H, E)` and `in_proj_bias`, or `q_proj_weight`
    /// `(E, E)`, `k_proj_weight` and `v_proj_weight` `(N·E/H, Ekv)` (PyTorch writes
    /// these when kdim/vdim differ from E); then `out_proj.weight` `(E, E)` and
    /// `out_proj.bias` `(E,)`. N is `kv_heads`, H by default. Biases may be absent
    /// (PyTorch's `bias=False`); they are zero then.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] naming the tensor that is missing, of a dtype not
    /// accepted, or of the wrong shape (`weights` when the file itself is malformed);
    /// [`AttentionError::InvalidOption`] naming `heads` or `kv_heads` as
    /// [`MhaWeights::new`]; `bias_k` / `bias_v` (PyTorch's `add_bias_kv`) are refused.
    pub fn from_safetensors(bytes: &[u8], heads: usize, kv_heads: Option<usize>) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| {
            AttentionError::shape("weights", format!("not a valid safetensors file: {e}"))
        })?;
        for name in ["bias_k", "bias_v"] {
            if st.tensor(name).is_ok() {
                return Err(AttentionError::option(
                    "weights",
                    format!("{name} (add_bias_kv) is not supported"),
                ));
            }
        }
        let out_weight = required(&st, OUT_W, "the output projection")?;
        let e = out_weight.shape()[0];
        let out_bias = optional_vector(&st, OUT_B)?;
        let packed = tensor(&st, IN_PROJ)?;
        let separate = ["q_proj_weight", "k_proj_weight", "v_proj_weight"]
            .into_iter()
            .filter(|n| st.tensor(n).is_ok())
            .collect::<Vec<_>>();
        let bias = optional_vector(&st, IN_BIAS)?;
        let (weights, dims, names) = match packed {
            Some(packed) => {
                if let Some(n) = separate.first() {
                    return Err(AttentionError::shape(
                        IN_PROJ,
                        format!("given together with {n}: use one or the other"),
                    ));
                }
                let packed = matrix(IN_PROJ, packed)?;
                let dims = MhaDims::new(e, e, heads, kv_heads)?;
                let kv = dims.kv_width();
                let want = [e + 2 * kv, e];
                if packed.shape() != want {
                    return Err(AttentionError::shape(
                        IN_PROJ,
                        format!(
                            "expected shape {want:?} (E + 2 * N * E / H rows, E = {e} from {OUT_W}, N = {}), got {:?}",
                            dims.kv_heads,
                            packed.shape()
                        ),
                    ));
                }
                (split3(&packed, e, kv), dims, &PACKED)
            }
            None => {
                if separate.is_empty() {
                    return Err(AttentionError::shape(
                        IN_PROJ,
                        format!(
                            "missing from the weights file (nor are q_proj_weight, k_proj_weight and v_proj_weight there); {}",
                            found(&st)
                        ),
                    ));
                }
                let dims = MhaDims::new(e, e, heads, kv_heads)?;
                let why = "the file has some of q_proj_weight, k_proj_weight, v_proj_weight";
                let q_weight = required(&st, "q_proj_weight", why)?;
                let k_weight = required(&st, "k_proj_weight", why)?;
                let v_weight = required(&st, "v_proj_weight", why)?;
                ([q_weight, k_weight, v_weight], dims, &SEPARATE)
            }
        };
        let [q_weight, k_weight, v_weight] = weights;
        let [q_bias, k_bias, v_bias] = split_bias(bias, e, dims.kv_width())?;
        let p = Projections {
            q_weight,
            q_bias,
            k_weight,
            k_bias,
            v_weight,
            v_bias,
            out_weight,
            out_bias,
        };
        Self::checked(p, heads, kv_heads, names)
    }
}

fn split_bias(bias: Option<Array1<f32>>, e: usize, kv: usize) -> Result<[Option<Array1<f32>>; 3]> {
    let Some(b) = bias else {
        return Ok([None, None, None]);
    };
    if b.len() != e + 2 * kv {
        return Err(AttentionError::shape(
            IN_BIAS,
            format!(
                "expected shape [{}] (E + 2 * N * E / H), got {:?}",
                e + 2 * kv,
                b.shape()
            ),
        ));
    }
    let [q, k, v] = split3(&b, e, kv);
    Ok([Some(q), Some(k), Some(v)])
}
