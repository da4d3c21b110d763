//! Launcher for `shaders/kernels/weights.wgsl`: the attention weights of a chunk after a
//! fused or decode pass, a three-stage softmax of the recomputed logits (the pass's
//! log-sum-exp only marks the rows that met a NaN).

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::plan::Chunk;
use crate::gpu::kernels::source;
use crate::problem::Problem;

/// Bindings: params, q, k, mask, key lengths, lse, weights, partial sums.
const fn spec(name: &'static str, source: &'static str) -> KernelSpec {
    KernelSpec {
        name,
        source,
        bindings: &[
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
        uniforms: &[crate::gpu::kernels::params::params_uniform],
    }
}

pub(crate) const SPEC: KernelSpec = spec("weights", source::WEIGHTS);
pub(crate) const SPEC_F16: KernelSpec = spec("weights_f16", source::WEIGHTS_F16);

/// The kernel for q and k stored as `elem`.
pub(crate) fn spec_for(elem: Elem) -> &'static KernelSpec {
    match elem {
        Elem::F32 => &SPEC,
        Elem::F16 => &SPEC_F16,
    }
}

/// As WG, KEYS, SEGMENT and SCALE_KEYS in weights.wgsl (checked by `reflection.rs`).
pub(crate) const WG: u64 = 64;
pub(crate) const KEYS: u64 = 4;
pub(crate) const SEGMENT: u64 = 256;
pub(crate) const SCALE_KEYS: u64 = 16;

/// The kernel's three stages, in recording order (the override STAGE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The masked logits, `KEYS` keys per invocation.
    Logit,
    /// (max, sum of exp(x - max)) of `SEGMENT` keys per invocation.
    Stats,
    /// exp(x - row max) / row sum, `SCALE_KEYS` keys per invocation.
    Normalise,
}

impl Stage {
    pub(crate) const ALL: [Stage; 3] = [Stage::Logit, Stage::Stats, Stage::Normalise];

    /// The override constants of this stage's pipeline.
    pub(crate) fn constants(self) -> [(&'static str, f64); 1] {
        let n = match self {
            Stage::Logit => 0.0,
            Stage::Stats => 1.0,
            Stage::Normalise => 2.0,
        };
        [("STAGE", n)]
    }

    fn keys(self) -> u64 {
        match self {
            Stage::Logit => KEYS,
            Stage::Stats => SEGMENT,
            Stage::Normalise => SCALE_KEYS,
        }
    }
}

/// f32 elements of the partials chunk `c` needs: a (max, sum) pair per row and `SEGMENT`
/// keys.
pub(crate) fn partials(p: &Problem, c: &Chunk) -> u64 {
    2 * (p.len_k as u64).div_ceil(SEGMENT) * c.row_count as u64 * c.bh_count as u64
}

/// Workgroups of `stage` over chunk `c`: one invocation per row and group of keys.
pub(crate) fn workgroups(stage: Stage, p: &Problem, c: &Chunk) -> u64 {
    let groups = (p.len_k as u64).div_ceil(stage.keys());
    (groups * c.row_count as u64 * c.bh_count as u64).div_ceil(WG)
}

/// Records `stage` over chunk `c` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    (stage, p, c): (Stage, &Problem, &Chunk),
) -> Result<()> {
    dispatch(ctx, pass, kernel, workgroups(stage, p, c), "q")
}
