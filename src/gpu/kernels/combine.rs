//! Split-KV merging: how the keys of a launch are cut into ranges for the first pass
//! (fused.wgsl with `PARTIAL`, or decode.wgsl), the partials those write, and the
//! launcher of the second pass, `shaders/combine.wgsl`.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::launch::SplitParams;
use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::plan::Chunk;
use crate::gpu::kernels::source;
use crate::problem::Problem;

/// Bindings: params, partials, out, lse, split.
pub(crate) const COMBINE_SPEC: KernelSpec = KernelSpec {
    name: "combine",
    source: source::COMBINE,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::ReadWrite,
        Binding::ReadWrite,
        Binding::Uniform,
    ],
    trusted: true,
    uniforms: &[
        crate::gpu::kernels::params::params_uniform,
        crate::gpu::kernels::launch::split_uniform,
    ],
};

/// Invocations of a combine workgroup.
pub(crate) const COMBINE_WG: u32 = 64;

/// The combine kernel's override constants.
pub(crate) fn combine_constants() -> Vec<(&'static str, f64)> {
    vec![("WG", f64::from(COMBINE_WG))]
}

/// Fewest keys worth a range of their own (merging one costs about this much).
const MIN_SPLIT_KEYS: u64 = 512;

/// How a launch cuts its keys: ranges of whole tiles of `tile_keys`, enough for about
/// `workgroups` workgroups in all, none longer than `budget` keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySplit {
    pub tile_keys: u32,
    pub workgroups: u32,
    pub budget: Option<u64>,
}

impl KeySplit {
    /// The longest range the budget allows, in whole tiles.
    fn longest(&self) -> u64 {
        let keys = u64::from(self.tile_keys);
        self.budget
            .map_or(u64::MAX, |b| (b / keys * keys).max(keys))
    }

    /// The most key ranges [`split`] makes for `p`.
    pub(crate) fn most_splits(&self, p: &Problem) -> u64 {
        let lk = p.len_k as u64;
        let parallel = if self.workgroups > 1 {
            lk.div_ceil(MIN_SPLIT_KEYS)
        } else {
            1
        };
        let budgeted = self.budget.map_or(1, |_| lk.div_ceil(self.longest()) + 1);
        parallel.max(budgeted).max(1)
    }
}

/// Cuts the keys of `s` (from [`super::launch::layout`]) into ranges as `how` says, and no
/// more than the binding limit on the partials allows.
///
/// # Errors
/// [`AttentionError::TooLarge`] when even one range's partials exceed `max_binding`.
pub(crate) fn split(
    p: &Problem,
    c: &Chunk,
    mut s: SplitParams,
    how: &KeySplit,
    max_binding: u64,
) -> Result<SplitParams> {
    let rows = (c.bh_count * c.row_count) as u64;
    let per_split = rows * (p.dim_v as u64 + 2) * 4;
    let most = max_binding / per_split.max(1);
    if most == 0 {
        return Err(AttentionError::TooLarge {
            arg: "q",
            detail: format!(
                "decode partials for {rows} rows of Dv {} exceed the {max_binding}-byte binding limit",
                p.dim_v
            ),
        });
    }
    let span = u64::from(s.key_hi - s.key_lo);
    let base = u64::from(s.kv_count) * u64::from(s.row_tiles);
    let keys = u64::from(how.tile_keys);
    let wanted = u64::from(how.workgroups)
        .div_ceil(base)
        .min(span.div_ceil(MIN_SPLIT_KEYS))
        .clamp(1, most);
    let split_len = (span.div_ceil(wanted).div_ceil(keys) * keys).clamp(keys, how.longest());
    if span.div_ceil(split_len) > most {
        return Err(AttentionError::TooLarge {
            arg: "k",
            detail: format!(
                "{} key ranges of {rows} rows exceed the {max_binding}-byte binding limit",
                span.div_ceil(split_len)
            ),
        });
    }
    s.split_len = split_len as u32;
    s.splits = span.div_ceil(split_len).max(1) as u32;
    Ok(s)
}

/// Elements of a chunk's partials: outputs `(rows, splits, Dv)`, then `(m, l)` pairs.
pub(crate) fn partial_elems(p: &Problem, c: &Chunk, s: &SplitParams) -> (u64, u64) {
    let n = (c.bh_count * c.row_count) as u64 * u64::from(s.splits);
    (n * p.dim_v as u64, 2 * n)
}

/// Combine workgroups of a chunk: one per row.
pub(crate) fn combine_workgroups(c: &Chunk) -> u64 {
    (c.bh_count * c.row_count) as u64
}

/// Records the kernel over chunk `c` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    c: &Chunk,
) -> Result<()> {
    dispatch(ctx, pass, kernel, combine_workgroups(c), "q")
}
