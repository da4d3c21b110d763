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
}

/// [`PatternParams`] as `shaders/kernels/patterns.wgsl` declares it.
pub(crate) fn pattern_uniform() -> UniformLayout {
    uniform_layout!(PatternParams as "Pattern" {
        n_sel, n_stat, stats_all, outputs, row_lo, row_count, col_lo, col_count, pool_rows,
        pool_cols, off_entropy, off_weights, off_max, off_mean, off_colsum, off_cut,
    })
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
