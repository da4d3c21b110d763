//! The launch shape the key-loop kernels share (fused.wgsl, decode.wgsl, and the combine
//! pass after them), the Rust side of `shaders/prelude/launch.wgsl`: which K/V heads,
//! row tiles and keys a chunk's workgroups cover, in the `Split` uniform.

use bytemuck::{Pod, Zeroable};

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
use crate::gpu::kernels::pipelines::KernelPipeline;
use crate::gpu::kernels::plan::{kv_head, Chunk};
use crate::problem::Problem;

/// As the WGSL struct `Split` in prelude/launch.wgsl, read by fused.wgsl, decode.wgsl and
/// combine.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct SplitParams {
    pub splits: u32,
    pub split_len: u32,
    pub key_lo: u32,
    pub key_hi: u32,
    pub kv_first: u32,
    pub kv_count: u32,
    pub row_tiles: u32,
    pub ml_base: u32,
}

/// [`SplitParams`] as `shaders/prelude/tile.wgsl` and combine.wgsl declare it.
pub(crate) fn split_uniform() -> UniformLayout {
    uniform_layout!(SplitParams as "Split" {
        splits, split_len, key_lo, key_hi, kv_first, kv_count, row_tiles, ml_base,
    })
}

/// The launch of one chunk with a single key range, for a kernel whose workgroups cover
/// `tile_rows` rows and load `tile_keys` keys at a time: the K/V heads it spans, row
/// tiles per K/V head, and the keys causal and window leave to some row of the chunk.
pub(crate) fn layout(p: &Problem, tile_rows: u64, tile_keys: u32, c: &Chunk) -> SplitParams {
    let kv_first = kv_head(p, c.bh_start);
    let kv_count = kv_head(p, c.bh_start + c.bh_count - 1) + 1 - kv_first;
    let rows_per_kv = (p.group().min(c.bh_count) * c.row_count) as u64;
    let row_tiles = rows_per_kv.div_ceil(tile_rows);
    let (first, last) = (c.row_start as i64, (c.row_start + c.row_count - 1) as i64);
    let (p_first, p_last) = (first + p.pos_offset, last + p.pos_offset);
    let lk = p.len_k as i64;
    let mut hi = lk;
    if p.causal {
        hi = hi.min(p_last + 1);
    }
    if let Some(r) = p.window_right {
        hi = hi.min(p_last + r + 1);
    }
    let keys = i64::from(tile_keys);
    // Key ranges start on tile boundaries, so no tile straddles two ranges.
    let lo = p.window_left.map_or(0, |l| (p_first - l).clamp(0, lk)) / keys * keys;
    let hi = hi.max(lo);
    SplitParams {
        splits: 1,
        split_len: (((hi - lo) as u64).div_ceil(keys as u64) * keys as u64).max(keys as u64) as u32,
        key_lo: lo as u32,
        key_hi: hi as u32,
        kv_first: kv_first as u32,
        kv_count: kv_count as u32,
        row_tiles: row_tiles as u32,
        ml_base: 0,
    }
}

/// Workgroups of a launch: K/V heads x row tiles x key ranges.
pub(crate) fn workgroups(s: &SplitParams) -> u64 {
    u64::from(s.kv_count) * u64::from(s.row_tiles) * u64::from(s.splits)
}

/// Records a key-loop kernel (fused.wgsl, or decode.wgsl as the first pass of split-KV)
/// over the launch `s` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    s: &SplitParams,
) -> Result<()> {
    dispatch(ctx, pass, kernel, workgroups(s), "q")
}
