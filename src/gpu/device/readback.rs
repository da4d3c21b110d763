//! The one place that maps device memory: copy ranges into a staging buffer, submit,
//! wait for the map callback through a future (so it also works on the web, where
//! `poll` does nothing), and convert.
//!
//! Waiting never hangs on a lost device: the wait is a loop of bounded polls that
//! checks the device-lost flag between them, and honours the context's wait timeout.

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::scopes::ErrorScopes;

/// Reads several `(buffer, offset, bytes)` ranges of f32 data with one submission and
/// one mapping; returns one vector per range.
pub(crate) async fn read_ranges(
    ctx: &GpuContext,
    ranges: &[(&wgpu::Buffer, u64, u64)],
) -> Result<Vec<Vec<f32>>> {
    let total: u64 = ranges.iter().map(|r| r.2).sum();
    let scopes = ErrorScopes::push(ctx);
    let staging = buffers::empty(
        ctx,
        "wgpu-attention readback",
        total,
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    )?;
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut at = 0;
    for &(buffer, offset, bytes) in ranges {
        if bytes > 0 {
            encoder.copy_buffer_to_buffer(buffer, offset, &staging, at, bytes);
        }
        at += bytes;
    }
    let submission = ctx.queue.submit([encoder.finish()]);
    scopes.pop(ctx, "copying results").await?;
    let data = map_after(ctx, &staging, total, Some(submission)).await?;
    let mut out = Vec::with_capacity(ranges.len());
    let mut at = 0usize;
    for &(_, _, bytes) in ranges {
        let n = (bytes / 4) as usize;
        out.push(data.get(at..at + n).unwrap_or_default().to_vec());
        at += n;
    }
    Ok(out)
}

/// Maps `bytes` of a `MAP_READ` buffer whose copies were already submitted.
#[allow(dead_code)] // Kept for launchers that submit their own copies.
pub(crate) async fn map_staging(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
) -> Result<Vec<f32>> {
    map_after(ctx, staging, bytes, None).await
}

/// Maps `bytes` of `staging` once `submission` (or, if `None`, the latest submission)
/// has finished.
async fn map_after(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
    submission: Option<wgpu::SubmissionIndex>,
) -> Result<Vec<f32>> {
    if bytes == 0 {
        return Ok(Vec::new());
    }
    ctx.check_alive()?;
    if bytes > staging.size() {
        return Err(AttentionError::Device(format!(
            "mapping {bytes} bytes of a {}-byte staging buffer",
            staging.size()
        )));
    }
    let slice = staging.slice(0..bytes);
    let (sender, receiver) = futures_intrusive::channel::shared::oneshot_channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        // The receiver only goes away if the caller's future was dropped.
        let _ = sender.send(r);
    });
    #[cfg(not(target_arch = "wasm32"))]
    wait(ctx, submission)?;
    #[cfg(target_arch = "wasm32")]
    let _ = submission;
    match receiver.receive().await {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(ctx.device_error(format!("mapping results: {e}"))),
        None => return Err(ctx.device_error("mapping results was cancelled")),
    }
    let view = slice
        .get_mapped_range()
        .map_err(|e| ctx.device_error(format!("reading mapped results: {e}")))?;
    let data: Vec<f32> = bytemuck::pod_collect_to_vec(&view);
    drop(view);
    staging.unmap();
    Ok(data)
}

/// How long one poll blocks before the loop looks at the lost flag and the deadline.
#[cfg(not(target_arch = "wasm32"))]
const POLL_STEP: std::time::Duration = std::time::Duration::from_millis(200);

/// Blocks until `submission` has finished and its callbacks have run.
///
/// # Errors
/// [`AttentionError::Device`] when the device is lost, the poll fails, or the
/// context's wait timeout passes first.
#[cfg(not(target_arch = "wasm32"))]
fn wait(ctx: &GpuContext, submission: Option<wgpu::SubmissionIndex>) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        ctx.check_alive()?;
        let step = match ctx.wait_timeout {
            None => POLL_STEP,
            Some(limit) => {
                let left = limit.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(ctx.device_error(format!(
                        "the device did not finish within the wait timeout of {limit:?}"
                    )));
                }
                left.min(POLL_STEP)
            }
        };
        let poll = wgpu::PollType::Wait {
            submission_index: submission.clone(),
            timeout: Some(step),
        };
        // wgpu panics (rather than returning an error) when the driver reports a lost
        // device or exhausted memory during the wait; the lost callback has run by then.
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.device.poll(poll)));
        match polled {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(wgpu::PollError::Timeout)) => continue,
            Ok(Err(e)) => return Err(ctx.device_error(format!("waiting for the device: {e}"))),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown failure");
                return Err(ctx.device_error(format!("waiting for the device: {message}")));
            }
        }
    }
}
