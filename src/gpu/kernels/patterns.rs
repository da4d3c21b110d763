//! Launcher for `shaders/kernels/patterns.wgsl`: the attention patterns of a window,
//! recomputed from q and k with no score matrix (see [`crate::patterns`]).

use bytemuck::{Pod, Zeroable};

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::source;

/// Bindings: params, pattern, q, k, mask, key lengths, selected heads, row stats, result.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "patterns",
    source: source::PATTERNS,
    bindings: &[
        Binding::Uniform,
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[crate::gpu::kernels::params::params_uniform, pattern_uniform],
};

/// As WG, ROWS and KEYS in patterns.wgsl.
pub(crate) const WG: u64 = 64;
pub(crate) const ROWS: u64 = 4;
pub(crate) const KEYS: u64 = 4;

/// Output bits of [`PatternParams::outputs`].
pub(crate) const OUT_ENTROPY: u32 = 1;
pub(crate) const OUT_WEIGHTS: u32 = 2;
pub(crate) const OUT_POOL: u32 = 4;
pub(crate) const OUT_COLSUM: u32 = 8;

/// As the WGSL struct `Pattern` in patterns.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(crate) struct PatternParams {
    pub n_sel: u32,
    pub n_stat: u32,
    pub stats_all: u32,
    pub outputs: u32,
    pub row_lo: u32,
    pub row_count: u32,
    pub col_lo: u32,
    pub col_count: u32,
    pub pool_rows: u32,
    pub pool_cols: u32,
    pub off_entropy: u32,
    pub off_weights: u32,
    pub off_max: u32,
    pub off_mean: u32,
    pub off_colsum: u32,
    pub off_cut: u32,
    pub slice_lo: u32,
    pub slice_hi: u32,
    pub slice_lo2: u32,
    pub slice_hi2: u32,
    pub slice_flags: u32,
    pub _pad: [u32; 3],
}

/// [`PatternParams`] as `shaders/kernels/patterns.wgsl` declares it.
pub(crate) fn pattern_uniform() -> UniformLayout {
    uniform_layout!(PatternParams as "Pattern" {
        n_sel, n_stat, stats_all, outputs, row_lo, row_count, col_lo, col_count, pool_rows,
        pool_cols, off_entropy, off_weights, off_max, off_mean, off_colsum, off_cut, slice_lo,
        slice_hi, slice_lo2, slice_hi2, slice_flags, _pad => ["_pad0", "_pad1", "_pad2"],
    })
}

/// Bits of [`PatternParams::slice_flags`].
const FIRST_SLICE: u32 = 1;
const LAST_SLICE: u32 = 2;

/// Loop iterations one invocation may run in one recording on drivers that cap them in
/// total (llvmpipe before Mesa 25: 65,535), with room for the loops' own bookkeeping.
pub(crate) const CAPPED_ITERATIONS: u64 = 24_576;

/// Loop iterations of one score over `dim` (four terms per iteration, then the rest).
fn score_iterations(dim: u64) -> u64 {
    dim / 4 + dim % 4 + 2
}

/// The kernel's stages, in recording order (the override STAGE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Row stats (max, sum) and entropy.
    Stats,
    /// The window's weights.
    Weights,
    /// The pooled map.
    Pool,
    /// Column sums.
    ColumnSums,
}

impl Stage {
    /// The override constants of this stage's pipeline.
    pub(crate) fn constants(self) -> [(&'static str, f64); 1] {
        let n = match self {
            Stage::Stats => 0.0,
            Stage::Weights => 1.0,
            Stage::Pool => 2.0,
            Stage::ColumnSums => 3.0,
        };
        [("STAGE", n)]
    }

    /// Invocations of this stage for `pp`.
    pub(crate) fn invocations(self, pp: &PatternParams) -> u64 {
        let (rows, cols) = (u64::from(pp.row_count), u64::from(pp.col_count));
        match self {
            Stage::Stats => u64::from(pp.n_stat) * rows.div_ceil(ROWS),
            Stage::Weights => u64::from(pp.n_sel) * rows * cols.div_ceil(KEYS),
            Stage::Pool => u64::from(pp.n_sel) * u64::from(pp.pool_rows * pp.pool_cols),
            Stage::ColumnSums => u64::from(pp.n_stat) * cols.div_ceil(KEYS),
        }
    }
}

impl Stage {
    /// The recordings of this stage for `pp` (a problem of `len_k` keys of dimension
    /// `dim`): one covering everything, or, with a cap of `budget` loop iterations per
    /// invocation, slices that each stay within it (stats over ranges of keys, the pool
    /// over sub-blocks of every cell, column sums over ranges of rows).
    pub(crate) fn slices(
        self,
        pp: &PatternParams,
        (len_k, dim): (u64, u64),
        budget: Option<u64>,
    ) -> Vec<PatternParams> {
        let score = score_iterations(dim);
        let budget = budget.unwrap_or(u64::MAX);
        let per = |unit: u64| (budget / unit).max(1);
        let ranges = |len: u64, step: u64| -> Vec<(u32, u32)> {
            let len = len.max(1);
            (0..len.div_ceil(step))
                .map(|n| ((n * step) as u32, ((n + 1) * step).min(len) as u32))
                .collect()
        };
        let (outer, inner) = match self {
            Stage::Stats => (ranges(len_k, per(score + 2)), vec![(0, 0)]),
            Stage::Weights => (vec![(0, pp.row_count)], vec![(0, 0)]),
            Stage::Pool => {
                let rows = u64::from(pp.row_count).div_ceil(u64::from(pp.pool_rows.max(1)));
                let cols = u64::from(pp.col_count).div_ceil(u64::from(pp.pool_cols.max(1)));
                let col_step = per(score + 1).min(cols.max(1));
                let row_step = per(col_step * (score + 1) + 2).min(rows.max(1));
                (ranges(rows, row_step), ranges(cols, col_step))
            }
            Stage::ColumnSums => (
                ranges(u64::from(pp.row_count), per(KEYS * (score + 1) + 2)),
                vec![(0, 0)],
            ),
        };
        let n = outer.len() * inner.len();
        let mut out = Vec::with_capacity(n);
        for &(lo, hi) in &outer {
            for &(lo2, hi2) in &inner {
                let at = out.len();
                let mut flags = 0;
                if at == 0 {
                    flags |= FIRST_SLICE;
                }
                if at + 1 == n {
                    flags |= LAST_SLICE;
                }
                out.push(PatternParams {
                    slice_lo: lo,
                    slice_hi: hi,
                    slice_lo2: lo2,
                    slice_hi2: hi2,
                    slice_flags: flags,
                    ..*pp
                });
            }
        }
        out
    }
}

/// Records `stage` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    stage: Stage,
    pp: &PatternParams,
) -> Result<()> {
    let groups = stage.invocations(pp).div_ceil(WG);
    dispatch(ctx, pass, kernel, groups, "q")
}
