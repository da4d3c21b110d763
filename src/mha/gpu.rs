//! The layer on the GPU: projections by the linear kernel straight into head layout,
//! the attention core on device tensors, the output projection back into rows.

use ndarray::{ArrayView3, Ix3, Ix4};

use crate::api::{attention_gpu_into_async, GpuOutputs};
use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::readback::read_ranges;
use crate::gpu::device::tensor::{to_array, GpuTensor};
use crate::mha::device::{self, MhaGpuWeights};
use crate::mha::options::{HeadWeights, MhaOptions};
use crate::mha::output::{average_heads, MhaOutput};
use crate::mha::problem::{allowed_keys, validate, MhaProblem};
use crate::options::{AttentionOptions, Mask};

/// Outputs of a GPU call, on the device until read.
#[derive(Debug, Clone)]
pub struct MhaGpuOutputs {
    /// `(B, L, E)`.
    pub y: GpuTensor,
    /// `(B, H, L, S)` per-head weights, when the options ask for weights (averaging
    /// over heads happens on reading, in [`mha_async`]).
    pub weights: Option<GpuTensor>,
}

impl MhaGpuOutputs {
    /// Device tensors of the right shapes for a call with these inputs and options.
    ///
    /// # Errors
    /// The input errors of [`mha_gpu_into_async`]; [`AttentionError::TooLarge`] or
    /// [`AttentionError::Device`] when allocation fails.
    pub fn allocate(
        ctx: &GpuContext,
        w: &MhaGpuWeights,
        x: &[usize],
        kv: Option<&[usize]>,
        opts: &MhaOptions<'_>,
    ) -> Result<Self> {
        let p = validate(w.dims, x, kv, opts)?;
        let (y, weights) = output_shapes(&p);
        Ok(Self {
            y: GpuTensor::allocate(ctx, "y", &y)?,
            weights: (opts.weights != HeadWeights::None)
                .then(|| GpuTensor::allocate(ctx, "attn_weights", &weights))
                .transpose()?,
        })
    }

    pub(crate) fn check(&self, y: &[usize], weights: Option<&[usize]>) -> Result<()> {
        if self.y.shape() != y {
            return Err(AttentionError::shape(
                "y",
                format!(
                    "output tensor has shape {:?}, the call needs {y:?}",
                    self.y.shape()
                ),
            ));
        }
        if let Some(want) = weights {
            let got = self.weights.as_ref().ok_or_else(|| {
                AttentionError::option(
                    "attn_weights",
                    "requested, but outputs have no weights tensor",
                )
            })?;
            if got.shape() != want {
                return Err(AttentionError::shape(
                    "attn_weights",
                    format!(
                        "output tensor has shape {:?}, the call needs {want:?}",
                        got.shape()
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn output_shapes(p: &MhaProblem) -> ([usize; 3], [usize; 4]) {
    let d = p.dims;
    (
        [p.batch, p.len_q, d.embed],
        [p.batch, d.heads, p.len_q, p.len_k],
    )
}

/// Multi-head attention on device tensors, writing into `outputs`: x `(B, L, E)`, kv
/// `(B, S, Ekv)` (x itself when `None`). Three submissions (projections, attention,
/// output projection); returns once they are queued.
///
/// # Errors
/// [`AttentionError::Shape`] naming `x`, `kv`, `key_padding_mask`, `y` or `weights`;
/// [`AttentionError::TooLarge`] naming a tensor beyond one storage binding;
/// [`AttentionError::Device`] when the device fails.
pub async fn mha_gpu_into_async(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    x: &GpuTensor,
    kv: Option<&GpuTensor>,
    opts: &MhaOptions<'_>,
    outputs: &MhaGpuOutputs,
) -> Result<()> {
    let p = validate(w.dims, x.shape(), kv.map(GpuTensor::shape), opts)?;
    let (y_shape, w_shape) = output_shapes(&p);
    let want_weights = opts.weights != HeadWeights::None;
    outputs.check(&y_shape, want_weights.then_some(&w_shape[..]))?;
    let d = p.dims;
    let (b, l, s, hd) = (p.batch, p.len_q, p.len_k, d.head_dim);
    let q = GpuTensor::allocate(ctx, "q", &[b, d.heads, l, hd])?;
    let k = GpuTensor::allocate(ctx, "k", &[b, d.kv_heads, s, hd])?;
    let v = GpuTensor::allocate(ctx, "v", &[b, d.kv_heads, s, hd])?;
    let kv = kv.map_or(("x", x), |t| ("kv", t));
    let [pk, pv] = device::keys_values(w, kv, &k, &v, b, s, s, 0)?;
    let pq = device::query(w, x, &q, b, l)?;
    device::submit(ctx, "projecting q, k and v", &[pq, pk, pv]).await?;

    let allowed = opts.key_padding_mask.map(|m| allowed_keys(m, s));
    let attn = AttentionOptions {
        causal: opts.causal,
        mask: allowed.as_ref().map(|a| Mask::Bool(a.view().into_dyn())),
        return_weights: want_weights,
        ..Default::default()
    };
    attend_and_project(ctx, w, [&q, &k, &v], &attn, outputs, (b, l), "the output").await
}

/// Attends the projected `q` (`(B, H, per_batch, D)`) against `k` and `v` as `attn` says,
/// writing the weights it asks for to `outputs.weights`, then projects the heads into
/// `outputs.y`. `what` names the output projection in device errors.
pub(crate) async fn attend_and_project(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    [q, k, v]: [&GpuTensor; 3],
    attn: &AttentionOptions<'_>,
    outputs: &MhaGpuOutputs,
    (batch, per_batch): (usize, usize),
    what: &str,
) -> Result<()> {
    let heads = GpuTensor::allocate(ctx, "out", q.shape())?;
    let core = GpuOutputs {
        out: heads.clone(),
        weights: outputs.weights.clone(),
        lse: None,
    };
    // The core's `weights` are this layer's attention weights, not its weights file.
    attention_gpu_into_async(ctx, q, k, v, attn, &core)
        .await
        .map_err(attention_weights_blamed)?;
    let po = device::output(w, &heads, &outputs.y, batch, per_batch)?;
    device::submit(ctx, &format!("projecting {what}"), &[po]).await
}

/// Reads `y` and the weights back with one mapping, averaging weights over heads when
/// asked.
pub(crate) async fn read_outputs(
    ctx: &GpuContext,
    y: &GpuTensor,
    weights: Option<&GpuTensor>,
    mode: HeadWeights,
) -> Result<MhaOutput> {
    let tensors: Vec<&GpuTensor> = std::iter::once(y).chain(weights).collect();
    let ranges: Vec<_> = tensors
        .iter()
        .map(|t| (t.buffer(), 0, t.len() as u64 * 4))
        .collect();
    let mut data = read_ranges(ctx, &ranges).await?.into_iter();
    let y = to_array(y.shape(), data.next().unwrap_or_default())?
        .into_dimensionality::<Ix3>()
        .map_err(|e| AttentionError::Device(format!("readback shape: {e}")))?;
    let weights = match (weights, mode) {
        (Some(t), HeadWeights::Averaged | HeadWeights::PerHead) => {
            let a = to_array(t.shape(), data.next().unwrap_or_default())?;
            let a = a
                .into_dimensionality::<Ix4>()
                .map_err(|e| AttentionError::Device(format!("readback shape: {e}")))?;
            Some(match mode {
                HeadWeights::Averaged => average_heads(&a),
                _ => a.into_dyn(),
            })
        }
        _ => None,
    };
    Ok(MhaOutput { y, weights })
}

/// Multi-head attention on host arrays: uploads x and kv, runs on the device, reads
/// back. The weights must already be on the device ([`MhaGpuWeights::upload`]).
///
/// # Errors
/// As [`mha_gpu_into_async`]; input errors come before anything touches the device.
pub async fn mha_async(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    x: ArrayView3<'_, f32>,
    kv: Option<ArrayView3<'_, f32>>,
    opts: &MhaOptions<'_>,
) -> Result<MhaOutput> {
    validate(w.dims, x.shape(), kv.as_ref().map(|a| a.shape()), opts)?;
    let xt = GpuTensor::upload(ctx, "x", x.into_dyn())?;
    let kvt = kv
        .map(|a| GpuTensor::upload(ctx, "kv", a.into_dyn()))
        .transpose()?;
    let outputs = MhaGpuOutputs::allocate(ctx, w, x.shape(), kv.as_ref().map(|a| a.shape()), opts)?;
    mha_gpu_into_async(ctx, w, &xt, kvt.as_ref(), opts, &outputs).await?;
    read_outputs(ctx, &outputs.y, outputs.weights.as_ref(), opts.weights).await
}

/// Blocking form of [`mha_async`]. Native only.
///
/// # Errors
/// As [`mha_async`].
#[cfg(not(target_arch = "wasm32"))]
pub fn mha(
    ctx: &GpuContext,
    w: &MhaGpuWeights,
    x: ArrayView3<'_, f32>,
    kv: Option<ArrayView3<'_, f32>>,
    opts: &MhaOptions<'_>,
) -> Result<MhaOutput> {
    pollster::block_on(mha_async(ctx, w, x, kv, opts))
}

/// Renames the attention core's `weights` argument to the layer's `attn_weights`.
fn attention_weights_blamed(e: AttentionError) -> AttentionError {
    match e {
        AttentionError::Shape {
            arg: "weights",
            detail,
        } => AttentionError::Shape {
            arg: "attn_weights",
            detail,
        },
        AttentionError::InvalidOption {
            arg: "weights",
            detail,
        } => AttentionError::InvalidOption {
            arg: "attn_weights",
            detail,
        },
        AttentionError::TooLarge {
            arg: "weights",
            detail,
        } => AttentionError::TooLarge {
            arg: "attn_weights",
            detail,
        },
        e => e,
    }
}
