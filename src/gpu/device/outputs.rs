//! The outputs of a GPU-resident call: device tensors until read.

use ndarray::{Ix3, Ix4};

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::readback::read_ranges;
use crate::gpu::device::tensor::{to_array, GpuTensor};
use crate::output::AttentionOutput;
use crate::problem::Problem;

/// Outputs of a GPU-resident call: they stay on the device until read.
#[derive(Debug, Clone)]
pub struct GpuOutputs {
    /// `(B, Hq, Lq, Dv)`.
    pub out: GpuTensor,
    /// `(B, Hq, Lq, Lk)`, when requested.
    pub weights: Option<GpuTensor>,
    /// `(B, Hq, Lq)`, when requested.
    pub lse: Option<GpuTensor>,
}

impl GpuOutputs {
    /// Device tensors of the right shapes for the validated problem `p` (whose sizes the
    /// caller has checked against the device).
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the device is lost or the allocation fails.
    pub(crate) fn for_problem(ctx: &GpuContext, p: &Problem) -> Result<Self> {
        let (b, h, lq, lk) = (p.batch, p.heads_q, p.len_q, p.len_k);
        Ok(Self {
            out: GpuTensor::allocate(ctx, "out", &[b, h, lq, p.dim_v])?,
            weights: p
                .return_weights
                .then(|| GpuTensor::allocate(ctx, "weights", &[b, h, lq, lk]))
                .transpose()?,
            lse: p
                .return_lse
                .then(|| GpuTensor::allocate(ctx, "lse", &[b, h, lq]))
                .transpose()?,
        })
    }

    /// Reads every output back to the host with one mapping.
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the copy or mapping fails.
    pub async fn read_async(&self, ctx: &GpuContext) -> Result<AttentionOutput> {
        let tensors: Vec<&GpuTensor> = [Some(&self.out), self.weights.as_ref(), self.lse.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        let ranges: Vec<_> = tensors
            .iter()
            .map(|t| (t.buffer(), 0, t.len() as u64 * 4))
            .collect();
        let mut data = read_ranges(ctx, &ranges).await?.into_iter();
        let mut next = |t: &GpuTensor| to_array(t.shape(), data.next().unwrap_or_default());
        let out = next(&self.out)?;
        let weights = self.weights.as_ref().map(&mut next).transpose()?;
        let lse = self.lse.as_ref().map(&mut next).transpose()?;
        Ok(AttentionOutput {
            out: into4(out)?,
            weights: weights.map(into4).transpose()?,
            lse: lse
                .map(|a| a.into_dimensionality::<Ix3>().map_err(shape_bug))
                .transpose()?,
        })
    }
}

fn shape_bug(e: ndarray::ShapeError) -> AttentionError {
    AttentionError::Device(format!("readback shape: {e}"))
}

fn into4(a: ndarray::ArrayD<f32>) -> Result<ndarray::Array4<f32>> {
    a.into_dimensionality::<Ix4>().map_err(shape_bug)
}
