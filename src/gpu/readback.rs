//! The one place that maps device memory: copy ranges into a staging buffer, submit,
//! wait for the map callback through a future (so it also works on the web, where
//! `poll` does nothing), and convert.

use crate::error::{AttentionError, Result};
use crate::gpu::context::GpuContext;

/// Reads several `(buffer, offset, bytes)` ranges of f32 data with one submission and
/// one mapping; returns one vector per range.
pub(crate) async fn read_ranges(
    ctx: &GpuContext,
    ranges: &[(&wgpu::Buffer, u64, u64)],
) -> Result<Vec<Vec<f32>>> {
    let total: u64 = ranges.iter().map(|r| r.2).sum();
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("wgpu-attention readback"),
        size: total.max(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut at = 0;
    for &(buffer, offset, bytes) in ranges {
        if bytes > 0 {
            encoder.copy_buffer_to_buffer(buffer, offset, &staging, at, bytes);
        }
        at += bytes;
    }
    ctx.queue.submit([encoder.finish()]);
    let data = map_staging(ctx, &staging, total).await?;
    let mut out = Vec::with_capacity(ranges.len());
    let mut at = 0usize;
    for &(_, _, bytes) in ranges {
        let n = (bytes / 4) as usize;
        out.push(data[at..at + n].to_vec());
        at += n;
    }
    Ok(out)
}

/// Maps `bytes` of a `MAP_READ` buffer whose copies were already submitted.
pub(crate) async fn map_staging(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
) -> Result<Vec<f32>> {
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let slice = staging.slice(0..bytes);
    let (sender, receiver) = futures_intrusive::channel::shared::oneshot_channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        // The receiver only goes away if the caller's future was dropped.
        let _ = sender.send(r);
    });
    #[cfg(not(target_arch = "wasm32"))]
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| AttentionError::Device(format!("waiting for the device: {e}")))?;
    match receiver.receive().await {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(AttentionError::Device(format!("mapping results: {e}"))),
        None => return Err(AttentionError::Device("mapping was cancelled".into())),
    }
    let view = slice
        .get_mapped_range()
        .map_err(|e| AttentionError::Device(format!("reading mapped results: {e}")))?;
    let data: Vec<f32> = bytemuck::pod_collect_to_vec(&view);
    drop(view);
    staging.unmap();
    Ok(data)
}
