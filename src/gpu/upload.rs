//! Host-side options that travel to the device with each call: the explicit mask and
//! the per-batch key lengths.

use wgpu::util::DeviceExt;

use crate::gpu::context::GpuContext;
use crate::options::{AttentionOptions, Mask};

fn storage(ctx: &GpuContext, label: &str, bytes: &[u8]) -> wgpu::Buffer {
    // Storage bindings are whole 4-byte words; a zero-size buffer cannot be bound.
    let mut padded = bytes.to_vec();
    padded.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
    ctx.device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: &padded,
            usage: wgpu::BufferUsages::STORAGE,
        })
}

/// The mask in its own (not broadcast) shape, row-major: one byte per boolean, or f32.
pub(crate) fn mask(ctx: &GpuContext, opts: &AttentionOptions<'_>) -> Option<wgpu::Buffer> {
    match opts.mask.as_ref()? {
        Mask::Bool(m) => {
            let bytes: Vec<u8> = m
                .as_standard_layout()
                .iter()
                .map(|&b| u8::from(b))
                .collect();
            Some(storage(ctx, "wgpu-attention mask", &bytes))
        }
        Mask::Additive(m) => {
            let values: Vec<f32> = m.as_standard_layout().iter().copied().collect();
            Some(storage(
                ctx,
                "wgpu-attention mask",
                bytemuck::cast_slice(&values),
            ))
        }
    }
}

/// The key lengths as u32.
pub(crate) fn kv_lens(ctx: &GpuContext, opts: &AttentionOptions<'_>) -> Option<wgpu::Buffer> {
    opts.kv_lens
        .map(|l| storage(ctx, "wgpu-attention kv_lens", bytemuck::cast_slice(l)))
}
