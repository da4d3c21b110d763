//! f16 storage of host arrays: uploaded as f16, half the transfer, no conversion pass.
//! (f32 device tensors are converted on the device by `kernels/cast.rs`.) The kernels
//! that read f16 accumulate and take the softmax in f32.

use ndarray::ArrayViewD;

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::tensor::TENSOR_USAGE;

/// Uploads host data as f16 (round to nearest even; out-of-range values become
/// infinities, NaN stays NaN).
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] naming `arg` when the data exceeds the device's buffer
/// size; [`crate::error::AttentionError::Device`] when the device is lost or the allocation fails.
pub(crate) fn upload(
    ctx: &GpuContext,
    arg: &'static str,
    data: ArrayViewD<'_, f32>,
) -> Result<wgpu::Buffer> {
    buffers::check_size(ctx, arg, data.shape(), data.len() as u64 * 2)?;
    let halves: Vec<half::f16> = data.iter().map(|&x| half::f16::from_f32(x)).collect();
    buffers::with_contents(
        ctx,
        "wgpu-attention f16 tensor",
        bytemuck::cast_slice(&halves),
        TENSOR_USAGE,
    )
}
