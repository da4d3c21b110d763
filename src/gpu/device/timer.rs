//! Timing recorded work on the device with timestamp queries, where the adapter has
//! `TIMESTAMP_QUERY`: an empty compute pass writes a timestamp before the work and
//! another after it.

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::readback::read_ranges;

/// A query set of two timestamps and the buffer they resolve into.
pub(crate) struct Timer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    period_ns: f64,
}

impl Timer {
    /// A timer, or `None` when the device cannot take timestamps.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::Device`] when the device is lost or the allocation fails.
    pub(crate) fn new(ctx: &GpuContext) -> Result<Option<Self>> {
        if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Ok(None);
        }
        let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgpu-attention timer"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolved = buffers::empty(
            ctx,
            "wgpu-attention timestamps",
            16,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )?;
        Ok(Some(Self {
            queries,
            resolved,
            period_ns: f64::from(ctx.queue.get_timestamp_period()),
        }))
    }

    fn mark(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        let (begin, end) = if index == 0 {
            (Some(0), None)
        } else {
            (None, Some(1))
        };
        // An empty pass: only its timestamp matters.
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpu-attention timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.queries,
                beginning_of_pass_write_index: begin,
                end_of_pass_write_index: end,
            }),
        }));
    }

    /// Records the start timestamp; call before recording the timed work.
    pub(crate) fn start(&self, encoder: &mut wgpu::CommandEncoder) {
        self.mark(encoder, 0);
    }

    /// Records the end timestamp and resolves both; call after the timed work.
    pub(crate) fn stop(&self, encoder: &mut wgpu::CommandEncoder) {
        self.mark(encoder, 1);
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolved, 0);
    }

    /// Milliseconds between the two timestamps, once the work was submitted.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::Device`] when reading the timestamps fails.
    pub(crate) async fn read_ms(&self, ctx: &GpuContext) -> Result<f64> {
        let words = read_ranges(ctx, &[(&self.resolved, 0, 16)]).await?;
        let bits: Vec<u32> = words.into_iter().flatten().map(|w| w.to_bits()).collect();
        let ticks = |i: usize| {
            let lo = u64::from(bits.get(2 * i).copied().unwrap_or(0));
            let hi = u64::from(bits.get(2 * i + 1).copied().unwrap_or(0));
            lo | (hi << 32)
        };
        let elapsed = ticks(1).saturating_sub(ticks(0));
        Ok(elapsed as f64 * self.period_ns / 1e6)
    }
}
