//! f16 storage: host arrays uploaded as f16, and f32 device tensors converted on the
//! device. The kernels that read f16 accumulate and take the softmax in f32.

use ndarray::ArrayViewD;

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::tensor::TENSOR_USAGE;
use crate::gpu::forward::plan::buffer_bytes;
use crate::gpu::kernels::cast::{self, CastParams, SLICE_ALIGN};
use crate::gpu::kernels::dispatch::{bind_group, grid, range};

/// Uploads host data as f16 (round to nearest even; out-of-range values become
/// infinities, NaN stays NaN).
///
/// # Errors
/// [`AttentionError::TooLarge`] naming `arg` when the data exceeds the device's buffer
/// size; [`AttentionError::Device`] when the device is lost or the allocation fails.
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

/// Records the conversion of the first `elems` f32 values of `src` into a new f16
/// buffer, which it returns.
///
/// # Errors
/// A device error building the pipeline, or [`AttentionError::TooLarge`] for a launch
/// beyond the grid limits.
pub(crate) async fn record_cast(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    src: &wgpu::Buffer,
    elems: u64,
) -> Result<wgpu::Buffer> {
    let pipe = ctx.pipeline(&cast::SPEC, &[]).await?;
    let dst = buffers::empty(
        ctx,
        "wgpu-attention f16 copy",
        buffer_bytes(elems, 2),
        wgpu::BufferUsages::STORAGE,
    )?;
    // Each slice's f32 source must fit one binding.
    let slice = (ctx.max_binding() / 4 / SLICE_ALIGN) * SLICE_ALIGN;
    if slice == 0 {
        return Err(AttentionError::TooLarge {
            arg: "q",
            detail: "the storage binding limit is too small to convert to f16".into(),
        });
    }
    let starts: Vec<u64> = (0..elems).step_by(slice as usize).collect();
    let cast_params: Vec<CastParams> = starts
        .iter()
        .map(|&s| CastParams {
            count: (elems - s).min(slice) as u32,
            _pad: [0; 3],
        })
        .collect();
    let (params, stride) = buffers::uniform_array(ctx, "wgpu-attention cast params", &cast_params)?;
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("wgpu-attention to f16"),
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipe.pipeline);
    for (n, &start) in starts.iter().enumerate() {
        let count = (elems - start).min(slice);
        let group = bind_group(
            ctx,
            "to_f16",
            &pipe.layout,
            vec![
                range(
                    &params,
                    n as u64 * stride,
                    std::mem::size_of::<CastParams>() as u64,
                ),
                range(src, start * 4, count * 4),
                range(&dst, start * 2, buffer_bytes(count, 2)),
            ],
        );
        let (x, y) = grid(ctx, cast::workgroups(count), "q")?;
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }
    Ok(dst)
}
