//! Launcher for `shaders/decode.wgsl`, the first pass of split-KV decoding: lanes are
//! keys, rows are broadcast from workgroup memory. Its variants are override constants
//! and two ways of reading K and V (one element or four at a time), never edits of the
//! source.

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
pub(crate) use crate::gpu::kernels::key_loop::vec4_reads;
use crate::gpu::kernels::key_loop::{pick_spec, vec4s, BINDINGS, KEY_LOOP_UNIFORMS};
use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::source;
use crate::problem::Problem;

const fn spec(name: &'static str, source: &'static str) -> KernelSpec {
    KernelSpec {
        name,
        source,
        bindings: BINDINGS,
        trusted: true,
        uniforms: KEY_LOOP_UNIFORMS,
    }
}

pub(crate) const SPEC: KernelSpec = spec("decode", source::DECODE);
pub(crate) const SPEC_VEC4: KernelSpec = spec("decode_vec4", source::DECODE_VEC4);
pub(crate) const SPEC_F16: KernelSpec = spec("decode_f16", source::DECODE_F16);
pub(crate) const SPEC_VEC4_F16: KernelSpec = spec("decode_vec4_f16", source::DECODE_VEC4_F16);

/// As ROWS_MAX and Q4_PRIVATE in decode.wgsl (checked by `reflection.rs`).
pub(crate) const ROWS_MAX: u32 = 16;
pub(crate) const Q4_PRIVATE: u32 = 64;

/// What a tuner candidate fixes: invocations (and keys per tile), key groups of the
/// weights·V step, whether each lane keeps the q rows in private memory (`Q_PRIVATE` in
/// decode.wgsl), whether it prefetches V rows (`PREFETCH_V`), and how many workgroups
/// to split the keys for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct DecodeCandidate {
    pub wg: u32,
    pub key_groups: u32,
    pub q_private: bool,
    pub prefetch_v: bool,
    pub workgroups: u32,
}

/// A decode kernel resolved for one call: a candidate's constants plus rows per
/// workgroup, which depend on the problem beyond its tuning class. (How it reads K and V
/// is decided per call too, see [`vec4_reads`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct DecodeKernel {
    pub wg: u32,
    pub key_groups: u32,
    pub q_private: bool,
    pub prefetch_v: bool,
    pub rows: u32,
    line_v4: u32,
    dim4: u32,
    dim_v4: u32,
}

impl DecodeCandidate {
    /// The kernel for `p` on this device: as many rows per workgroup as one K/V head has
    /// (a power of two, at most ROWS_MAX) and workgroup memory allows; `None` when even
    /// one row does not fit (which depends only on the head dims, so it holds for the
    /// whole tuning class).
    pub(crate) fn resolve(
        &self,
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
    ) -> Option<DecodeKernel> {
        let l = &ctx.limits;
        let (dim4, dim_v4) = (vec4s(p.dim), vec4s(p.dim_v));
        let lanes_ok = self.wg >= 1
            && self.key_groups >= 1
            && self.key_groups * dim_v4 <= self.wg
            && self.wg <= l.max_compute_invocations_per_workgroup
            && self.wg <= l.max_compute_workgroup_size_x;
        if !lanes_ok {
            return None;
        }
        let wanted = ((p.group() * p.len_q).min(ROWS_MAX as usize) as u32).next_power_of_two();
        let mut rows = wanted.min(ROWS_MAX);
        let kernel = |rows| DecodeKernel {
            wg: self.wg,
            key_groups: self.key_groups,
            q_private: self.q_private,
            prefetch_v: self.prefetch_v,
            rows,
            line_v4: (64 / (4 * elem.bytes())) as u32,
            dim4,
            dim_v4,
        };
        while rows >= 1 {
            let k = kernel(rows);
            let private_ok = !self.q_private || rows * dim4 <= Q4_PRIVATE;
            if private_ok && k.shared_bytes() <= u64::from(l.max_compute_workgroup_storage_size) {
                return Some(k);
            }
            rows /= 2;
        }
        None
    }
}

impl DecodeKernel {
    /// vec4s of the workgroup array that holds q rows, then the key groups' sums.
    fn shared4(&self) -> u32 {
        (self.rows * self.dim4).max(self.rows * self.key_groups * self.dim_v4)
    }

    /// Workgroup memory the kernel declares.
    fn shared_bytes(&self) -> u64 {
        let rows4 = u64::from(self.shared4()) * 16;
        let tile = u64::from(self.rows) * u64::from(self.wg) * 4;
        rows4 + tile + 3 * u64::from(ROWS_MAX) * 4 + 4
    }

    /// The kernel for `p` with q, k and v stored as `elem`.
    pub(crate) fn spec(ctx: &GpuContext, p: &Problem, elem: Elem) -> &'static KernelSpec {
        pick_spec(ctx, p, elem, [&SPEC, &SPEC_VEC4, &SPEC_F16, &SPEC_VEC4_F16])
    }

    /// The override constants.
    pub(crate) fn constants(&self) -> Vec<(&'static str, f64)> {
        self.constants_direct(false)
    }

    /// The override constants, with `DIRECT` (each workgroup's range holds every key of
    /// its rows: it writes the finished output, and no combine pass follows) as given.
    pub(crate) fn constants_direct(&self, direct: bool) -> Vec<(&'static str, f64)> {
        vec![
            ("DIRECT", if direct { 1.0 } else { 0.0 }),
            ("WG", f64::from(self.wg)),
            ("ROWS", f64::from(self.rows)),
            ("KEY_GROUPS", f64::from(self.key_groups)),
            ("HEAD_DIM4", f64::from(self.dim4)),
            ("HEAD_DIM_V4", f64::from(self.dim_v4)),
            ("SHARED4", f64::from(self.shared4())),
            ("Q_PRIVATE", if self.q_private { 1.0 } else { 0.0 }),
            ("PREFETCH_V", if self.prefetch_v { 1.0 } else { 0.0 }),
            ("LINE_V4", f64::from(self.line_v4)),
        ]
    }
}
