//! Launcher for `shaders/fused.wgsl`: the one-pass flash-attention kernel, also the first
//! pass of split-KV decoding. Its variants are override constants (tile sizes, head
//! dims, partial output), never edits of the source.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused_lanes::{self, LanesShape};
use crate::gpu::kernels::fused_tiled::{self, TiledShape};
use crate::gpu::kernels::key_loop::KEY_LOOP_UNIFORMS;
pub(crate) use crate::gpu::kernels::key_loop::{vec4s, BINDINGS};
use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::source;
use crate::problem::Problem;

/// Bindings: params, q, k, v, mask, kv_lens, out (or partials), lse, split.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "fused",
    source: source::FUSED,
    bindings: BINDINGS,
    trusted: true,
    uniforms: KEY_LOOP_UNIFORMS,
};

/// As [`SPEC`], with q, k and v stored as f16.
pub(crate) const SPEC_F16: KernelSpec = KernelSpec {
    name: "fused_f16",
    source: source::FUSED_F16,
    bindings: BINDINGS,
    trusted: true,
    uniforms: KEY_LOOP_UNIFORMS,
};

/// As REG4, SREG and ROWS_MAX in fused.wgsl (checked by `reflection.rs`): the private
/// arrays' sizes (REG4 in vec4s).
pub(crate) const REG4: u64 = 64;
pub(crate) const SREG: u32 = 128;
pub(crate) const ROWS_MAX: u32 = 8;

/// Largest D and Dv the kernel handles (one row of each lives in private memory).
pub(crate) const MAX_DIM: usize = 4 * REG4 as usize;

/// Which kernel a fused configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FusedKind {
    /// fused.wgsl: each invocation owns whole query rows.
    Rows,
    /// fused_tiled.wgsl in that shape.
    Tiled(TiledShape),
    /// fused_lanes.wgsl in that shape.
    Lanes(LanesShape),
}

impl FusedKind {
    /// The kernel choice this configuration belongs to (what forcing a kernel selects).
    pub(crate) fn kernel(&self) -> crate::options::FusedKernel {
        match self {
            FusedKind::Rows => crate::options::FusedKernel::Rows,
            FusedKind::Tiled(_) => crate::options::FusedKernel::Tiled,
            FusedKind::Lanes(_) => crate::options::FusedKernel::Lanes,
        }
    }
}

/// One set of override constants: invocations per workgroup, rows per invocation, keys
/// per K/V tile, and the kernel (for the tiled and lanes kernels `wg` and `keys` are
/// their invocations and keys per tile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FusedConfig {
    pub wg: u32,
    pub rows: u32,
    pub keys: u32,
    pub kind: FusedKind,
}

impl FusedConfig {
    /// Whether this configuration can run `p` on this device: private arrays, workgroup
    /// memory and workgroup size all within bounds.
    pub(crate) fn fits(&self, ctx: &GpuContext, p: &Problem) -> bool {
        match &self.kind {
            FusedKind::Tiled(t) => return t.fits(ctx, p),
            FusedKind::Lanes(s) => return s.fits(ctx, p),
            FusedKind::Rows => {}
        }
        let (d4, dv4) = (u64::from(vec4s(p.dim)), u64::from(vec4s(p.dim_v)));
        let shared = u64::from(self.keys) * (d4 + dv4) * 16 + 16;
        let l = &ctx.limits;
        self.rows >= 1
            && self.rows <= ROWS_MAX
            && u64::from(self.rows) * d4.max(dv4) <= REG4
            && self.rows * self.keys <= SREG
            && self.keys >= 1
            && self.wg >= 1
            && self.wg <= l.max_compute_invocations_per_workgroup
            && self.wg <= l.max_compute_workgroup_size_x
            && shared <= u64::from(l.max_compute_workgroup_storage_size)
    }

    /// Whether the tuner should compile and time this configuration for `p`: all but the
    /// lanes kernel's slowest-compiling shapes on short problems (see
    /// `LanesShape::worth_timing`).
    pub(crate) fn worth_timing(&self, p: &Problem) -> bool {
        match &self.kind {
            FusedKind::Lanes(s) => s.worth_timing(p),
            FusedKind::Rows | FusedKind::Tiled(_) => true,
        }
    }

    /// The override constants for `p`; `partial` for the first pass of decoding.
    pub(crate) fn constants(&self, p: &Problem, partial: bool) -> Vec<(&'static str, f64)> {
        match &self.kind {
            FusedKind::Tiled(t) => return t.constants(p, partial),
            FusedKind::Lanes(s) => return s.constants(partial),
            FusedKind::Rows => {}
        }
        vec![
            ("WG", f64::from(self.wg)),
            ("ROWS", f64::from(self.rows)),
            ("KEYS", f64::from(self.keys)),
            ("HEAD_DIM4", f64::from(vec4s(p.dim))),
            ("HEAD_DIM_V4", f64::from(vec4s(p.dim_v))),
            ("PARTIAL", if partial { 1.0 } else { 0.0 }),
        ]
    }

    /// Rows one workgroup covers.
    pub(crate) fn tile_rows(&self) -> u64 {
        match &self.kind {
            FusedKind::Tiled(_) => fused_tiled::ROWS,
            FusedKind::Lanes(s) => s.tile_rows(),
            FusedKind::Rows => u64::from(self.wg) * u64::from(self.rows),
        }
    }

    /// The kernel for `p` with q, k and v stored as `elem`.
    pub(crate) fn spec(&self, ctx: &GpuContext, p: &Problem, elem: Elem) -> &'static KernelSpec {
        match (&self.kind, elem) {
            (FusedKind::Tiled(t), _) => fused_tiled::spec(t.variant(ctx, p, elem)),
            (FusedKind::Lanes(s), _) => fused_lanes::spec(s.variant(ctx, p, elem)),
            (FusedKind::Rows, Elem::F32) => &SPEC,
            (FusedKind::Rows, Elem::F16) => &SPEC_F16,
        }
    }
}

/// Checks the sizes the kernel supports.
///
/// # Errors
/// [`AttentionError::InvalidOption`] on `path` when D or Dv exceeds [`MAX_DIM`].
pub(crate) fn check(p: &Problem, path: &str) -> Result<()> {
    if p.dim > MAX_DIM || p.dim_v > MAX_DIM {
        return Err(AttentionError::option(
            "path",
            format!(
                "the {path} kernel supports D and Dv up to {MAX_DIM}, got D {} and Dv {} \
                 (q [{}, {}, {}, {}]); use KernelPath::Staged or Auto",
                p.dim, p.dim_v, p.batch, p.heads_q, p.len_q, p.dim
            ),
        ));
    }
    Ok(())
}
