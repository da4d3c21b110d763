//! Timestamps between the stages of one submission's recorded work, where the adapter
//! has `TIMESTAMP_QUERY` (the llama pass's per-stage split).

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::readback::read_ranges;

/// Timestamps between the stages of recorded work: [`StageMarks::mark`] after each
/// stage charges the time since the previous mark to that stage. Each mark is an empty
/// compute pass that writes a timestamp at its start, so the stages are timed as the
/// device ran them, in one submission.
pub(crate) struct StageMarks {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    capacity: u32,
    stages: Vec<&'static str>,
    period_ns: f64,
}

impl StageMarks {
    /// Room for `capacity` marks (the first one starts the clock), or `None` when the
    /// device cannot take timestamps.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::Device`] when the device is lost or the allocation
    /// fails; [`crate::error::AttentionError::TooLarge`] past the query set limit.
    pub(crate) fn new(ctx: &GpuContext, capacity: u32) -> Result<Option<Self>> {
        if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Ok(None);
        }
        if capacity == 0 || capacity > wgpu::QUERY_SET_MAX_QUERIES {
            return Err(crate::error::AttentionError::TooLarge {
                arg: "stage marks",
                detail: format!(
                    "{capacity}: a query set holds 1 to {}",
                    wgpu::QUERY_SET_MAX_QUERIES
                ),
            });
        }
        let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgpu-attention stage marks"),
            ty: wgpu::QueryType::Timestamp,
            count: capacity,
        });
        let resolved = buffers::empty(
            ctx,
            "wgpu-attention stage timestamps",
            u64::from(capacity) * 8,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )?;
        Ok(Some(Self {
            queries,
            resolved,
            capacity,
            stages: Vec::with_capacity(capacity as usize),
            period_ns: f64::from(ctx.queue.get_timestamp_period()),
        }))
    }

    /// Records a timestamp ending `stage` (the first mark's stage names nothing timed).
    /// The caller sizes the set for every mark it makes; a mark past the capacity is
    /// dropped, and its stage's time goes uncounted.
    pub(crate) fn mark(&mut self, encoder: &mut wgpu::CommandEncoder, stage: &'static str) {
        let index = self.stages.len() as u32;
        if index >= self.capacity {
            return;
        }
        self.stages.push(stage);
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpu-attention stage mark"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.queries,
                beginning_of_pass_write_index: Some(index),
                end_of_pass_write_index: None,
            }),
        }));
    }

    /// Resolves the marks made so far; call once, after the last mark.
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let n = self.stages.len() as u32;
        if n > 0 {
            encoder.resolve_query_set(&self.queries, 0..n, &self.resolved, 0);
        }
    }

    /// Milliseconds per mark after the first, charged to its stage, in mark order, once
    /// the work was submitted. A driver whose clock steps back reads 0 for that stage.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::Device`] when reading the timestamps fails.
    pub(crate) async fn read_ms(&self, ctx: &GpuContext) -> Result<Vec<(&'static str, f64)>> {
        let n = self.stages.len();
        if n < 2 {
            return Ok(Vec::new());
        }
        let words = read_ranges(ctx, &[(&self.resolved, 0, n as u64 * 8)]).await?;
        let bits: Vec<u32> = words.into_iter().flatten().map(|w| w.to_bits()).collect();
        let ticks = |i: usize| {
            let lo = u64::from(bits.get(2 * i).copied().unwrap_or(0));
            let hi = u64::from(bits.get(2 * i + 1).copied().unwrap_or(0));
            lo | (hi << 32)
        };
        Ok((1..n)
            .map(|i| {
                let elapsed = ticks(i).saturating_sub(ticks(i - 1));
                (self.stages[i], elapsed as f64 * self.period_ns / 1e6)
            })
            .collect())
    }
}
