//! Every device buffer the library makes comes from here, so that a size the device
//! cannot hold is an [`AttentionError::TooLarge`] before the device is touched, and a
//! failed allocation is an error rather than a panic (wgpu's `create_buffer_init`
//! panics when the buffer it just made is invalid).

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;

/// Checks that a tensor of `shape` taking `bytes` fits the device's `max_buffer_size`.
///
/// # Errors
/// [`AttentionError::TooLarge`] naming `arg` and its shape.
pub(crate) fn check_size(
    ctx: &GpuContext,
    arg: &'static str,
    shape: &[usize],
    bytes: u64,
) -> Result<()> {
    check(ctx, arg, || format!("shape {shape:?}"), bytes)
}

fn check(
    ctx: &GpuContext,
    arg: &'static str,
    what: impl FnOnce() -> String,
    bytes: u64,
) -> Result<()> {
    let max = ctx.limits.max_buffer_size;
    if bytes > max {
        return Err(AttentionError::TooLarge {
            arg,
            detail: format!(
                "{} needs a {bytes}-byte buffer, above the device's max_buffer_size of {max} bytes",
                what()
            ),
        });
    }
    Ok(())
}

/// Bytes of a row-major f32 tensor of `shape`, or `TooLarge` when the count overflows.
pub(crate) fn f32_bytes(arg: &'static str, shape: &[usize]) -> Result<u64> {
    shape
        .iter()
        .try_fold(4u64, |acc, &n| acc.checked_mul(n as u64))
        .ok_or_else(|| AttentionError::TooLarge {
            arg,
            detail: format!("shape {shape:?} has more elements than memory can address"),
        })
}

/// An uninitialised buffer of `size` bytes (at least 4: wgpu cannot bind an empty one).
pub(crate) fn empty(
    ctx: &GpuContext,
    label: &str,
    size: u64,
    usage: wgpu::BufferUsages,
) -> Result<wgpu::Buffer> {
    ctx.check_alive()?;
    let size = size.max(4).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
    check(ctx, "buffer", || format!("the {label}"), size)?;
    Ok(ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: false,
    }))
}

/// A buffer holding `contents`, padded with zeros to whole 4-byte words.
pub(crate) fn with_contents(
    ctx: &GpuContext,
    label: &str,
    contents: &[u8],
    usage: wgpu::BufferUsages,
) -> Result<wgpu::Buffer> {
    ctx.check_alive()?;
    let size = (contents.len() as u64)
        .max(4)
        .next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
    check(ctx, "buffer", || format!("the {label}"), size)?;
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: true,
    });
    {
        let mut view = buffer
            .get_mapped_range_mut(..)
            .map_err(|e| ctx.device_error(format!("creating {label}: {e}")))?;
        // Mapped-at-creation memory starts zeroed, so the padding needs no write.
        view.slice(..contents.len()).copy_from_slice(contents);
    }
    buffer.unmap();
    Ok(buffer)
}

/// One uniform buffer holding `items` at offsets aligned for binding each on its own
/// (one entry per chunk or dispatch). Returns the buffer and the stride between entries.
///
/// # Errors
/// As [`with_contents`].
pub(crate) fn uniform_array<T: bytemuck::Pod>(
    ctx: &GpuContext,
    label: &str,
    items: &[T],
) -> Result<(wgpu::Buffer, u64)> {
    let size = std::mem::size_of::<T>();
    let stride =
        (size as u64).next_multiple_of(u64::from(ctx.limits.min_uniform_buffer_offset_alignment));
    let mut bytes = vec![0u8; stride as usize * items.len().max(1)];
    for (entry, item) in bytes.chunks_mut(stride as usize).zip(items) {
        entry[..size].copy_from_slice(bytemuck::bytes_of(item));
    }
    let buffer = with_contents(ctx, label, &bytes, wgpu::BufferUsages::UNIFORM)?;
    Ok((buffer, stride))
}
