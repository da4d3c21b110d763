//! Launcher for `shaders/kernels/decode_subgroup.wgsl`, the first pass of split-KV
//! decoding on adapters with subgroups: groups of `d_split` lanes share one key's dot
//! product and reduce it with subgroup shuffles, and every subgroup walks its own keys
//! without workgroup barriers. Same bindings, partials and row rules as decode.wgsl; the
//! same two ways of reading K and V.

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::decode::DecodeCandidate;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::key_loop::{pick_spec, vec4s, BINDINGS, KEY_LOOP_UNIFORMS};
use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::source;
use crate::gpu::kernels::subgroups::subgroup_sizes;
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

pub(crate) const SPEC: KernelSpec = spec("decode_subgroup", source::DECODE_SUBGROUP);
pub(crate) const SPEC_VEC4: KernelSpec = spec("decode_subgroup_vec4", source::DECODE_SUBGROUP_VEC4);
pub(crate) const SPEC_F16: KernelSpec = spec("decode_subgroup_f16", source::DECODE_SUBGROUP_F16);
pub(crate) const SPEC_VEC4_F16: KernelSpec =
    spec("decode_subgroup_vec4_f16", source::DECODE_SUBGROUP_VEC4_F16);

/// As ROWS_MAX and REG4_MAX in decode_subgroup.wgsl (checked by `reflection.rs`).
pub(crate) const ROWS_MAX: u32 = 16;
pub(crate) const REG4_MAX: u32 = 32;

/// What a tuner candidate fixes: invocations per workgroup, lanes per key (`DSPLIT`),
/// and how many workgroups to split the keys for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SubgroupDecodeCandidate {
    pub wg: u32,
    pub d_split: u32,
    pub workgroups: u32,
}

/// A subgroup decode kernel resolved for one call: a candidate's constants plus rows per
/// workgroup and the most subgroups a workgroup can hold on this adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SubgroupDecodeKernel {
    pub wg: u32,
    pub d_split: u32,
    pub rows: u32,
    subgroups_max: u32,
    dim4: u32,
    dim_v4: u32,
}

/// A decode candidate of either kernel: decode.wgsl (lanes are keys) or, on adapters
/// with subgroups, decode_subgroup.wgsl (groups of lanes share a key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DecodeChoice {
    Lanes(DecodeCandidate),
    Subgroup(SubgroupDecodeCandidate),
}

impl DecodeChoice {
    /// Whether the candidate has a kernel for `p` on this device.
    pub(crate) fn fits(&self, ctx: &GpuContext, p: &Problem, elem: Elem) -> bool {
        match self {
            DecodeChoice::Lanes(c) => c.resolve(ctx, p, elem).is_some(),
            DecodeChoice::Subgroup(c) => c.resolve(ctx, p, elem).is_some(),
        }
    }

    /// How many workgroups the keys are split for.
    pub(crate) fn workgroups(&self) -> u32 {
        match self {
            DecodeChoice::Lanes(c) => c.workgroups,
            DecodeChoice::Subgroup(c) => c.workgroups,
        }
    }
}

impl SubgroupDecodeCandidate {
    /// The kernel for `p` on this device, or `None` where the device has no subgroups, or
    /// subgroups smaller than `d_split` (it must divide every subgroup size), or larger
    /// than the workgroup (which must be a multiple of each, so subgroups are full), or
    /// where even one row does not fit the registers and workgroup memory.
    pub(crate) fn resolve(
        &self,
        ctx: &GpuContext,
        p: &Problem,
        _elem: Elem,
    ) -> Option<SubgroupDecodeKernel> {
        let (smallest, largest) = subgroup_sizes(ctx)?;
        let l = &ctx.limits;
        let shape_ok = self.d_split.is_power_of_two()
            && self.d_split <= smallest
            && self.wg.is_multiple_of(largest)
            && self.wg <= l.max_compute_invocations_per_workgroup
            && self.wg <= l.max_compute_workgroup_size_x;
        if !shape_ok {
            return None;
        }
        let (dim4, dim_v4) = (vec4s(p.dim), vec4s(p.dim_v));
        let wanted = ((p.group() * p.len_q).min(ROWS_MAX as usize) as u32).next_power_of_two();
        let mut rows = wanted.min(ROWS_MAX);
        while rows >= 1 {
            let k = SubgroupDecodeKernel {
                wg: self.wg,
                d_split: self.d_split,
                rows,
                subgroups_max: self.wg / smallest,
                dim4,
                dim_v4,
            };
            let regs_ok = rows * k.slice4() <= REG4_MAX && rows * k.slice_v4() <= REG4_MAX;
            if regs_ok && k.shared_bytes() <= u64::from(l.max_compute_workgroup_storage_size) {
                return Some(k);
            }
            rows /= 2;
        }
        None
    }
}

impl SubgroupDecodeKernel {
    /// vec4 columns per lane of a q row, as SLICE4 in the WGSL.
    fn slice4(&self) -> u32 {
        self.dim4.div_ceil(self.d_split)
    }

    /// As SLICE_V4.
    fn slice_v4(&self) -> u32 {
        self.dim_v4.div_ceil(self.d_split)
    }

    /// Workgroup memory the kernel declares: the key length, three counters, their copy
    /// (a vec3, 16 bytes), each subgroup's maxima, sums and NaN bits, and the output sums.
    fn shared_bytes(&self) -> u64 {
        let (subgroups, rows) = (u64::from(self.subgroups_max), u64::from(self.rows));
        4 + 12 + 16 + 2 * subgroups * rows * 4 + subgroups * 4 + rows * u64::from(self.dim_v4) * 16
    }

    /// The kernel for `p` with q, k and v stored as `elem`.
    pub(crate) fn spec(ctx: &GpuContext, p: &Problem, elem: Elem) -> &'static KernelSpec {
        pick_spec(ctx, p, elem, [&SPEC, &SPEC_VEC4, &SPEC_F16, &SPEC_VEC4_F16])
    }

    /// The override constants.
    pub(crate) fn constants(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("WG", f64::from(self.wg)),
            ("ROWS", f64::from(self.rows)),
            ("DSPLIT", f64::from(self.d_split)),
            ("HEAD_DIM4", f64::from(self.dim4)),
            ("HEAD_DIM_V4", f64::from(self.dim_v4)),
            ("SUBGROUPS_MAX", f64::from(self.subgroups_max)),
        ]
    }
}
