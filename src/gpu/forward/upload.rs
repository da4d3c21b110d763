//! Host data that travels to the device with each call: the explicit mask and the
//! per-batch key lengths.

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::options::Mask;

fn storage(ctx: &GpuContext, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
    // Padded to whole 4-byte words (storage bindings are words) and never empty.
    buffers::with_contents(ctx, label, bytes, wgpu::BufferUsages::STORAGE)
}

/// The mask in its own (not broadcast) shape, row-major: one byte per boolean, or f32.
pub(crate) fn mask(ctx: &GpuContext, mask: Option<&Mask<'_>>) -> Result<Option<wgpu::Buffer>> {
    let Some(mask) = mask else {
        return Ok(None);
    };
    let buffer = match mask {
        Mask::Bool(m) => {
            let bytes: Vec<u8> = m
                .as_standard_layout()
                .iter()
                .map(|&b| u8::from(b))
                .collect();
            storage(ctx, "wgpu-attention mask", &bytes)?
        }
        Mask::Additive(m) => {
            let values: Vec<f32> = m.as_standard_layout().iter().copied().collect();
            storage(ctx, "wgpu-attention mask", bytemuck::cast_slice(&values))?
        }
    };
    Ok(Some(buffer))
}

/// The key lengths as u32.
pub(crate) fn kv_lens(ctx: &GpuContext, lens: Option<&[u32]>) -> Result<Option<wgpu::Buffer>> {
    // COPY_DST: a prepared call's lengths are rewritten in place (`set_kv_lens`).
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    lens.map(|l| {
        buffers::with_contents(
            ctx,
            "wgpu-attention kv_lens",
            bytemuck::cast_slice(l),
            usage,
        )
    })
    .transpose()
}
