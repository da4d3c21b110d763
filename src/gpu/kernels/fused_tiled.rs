//! Launcher for `shaders/kernels/fused_tiled.wgsl`: the fused flash-attention kernel as
//! GEMM micro-tiles (64 rows x 4 * KG keys per tile, 4 x 4 scores per invocation), for
//! hardware GPUs. Same bindings, options and partial output as fused.wgsl.
//!
//! The source is completed here: lines of the kernel holding `$n` are repeated once per
//! output chunk n < NV (the vec4 columns an invocation owns, divided among the row
//! group's KG invocations), and `$each(x)` becomes the comma-separated list of x for
//! every n, so that micro-tiles are named variables. With subgroups the source enables
//! them and reduces rows with shuffles. Everything else is override constants.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::key_loop::{generated_spec, row_kernel_preludes, vec4_reads, vec4s};
use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::subgroups::{self, subgroup_sizes};
use crate::gpu::kernels::wgsl::fill;
use crate::problem::Problem;

/// Rows one workgroup covers (ROWS in the kernel).
pub(crate) const ROWS: u64 = 64;

/// Largest D and Dv the kernel handles.
pub(crate) const MAX_DIM: usize = 256;

/// Output vec4 chunks per invocation at most (named variables in the source).
pub(crate) const MAX_NV: u32 = 16;

/// The shape of one tiled configuration: key groups (invocations sharing a row, a power
/// of two: 16 * kg invocations, 4 * kg keys per tile), vec4s of D staged per chunk (0:
/// the whole of Q stays in workgroup memory), whether rows reduce with subgroups, and
/// whether row groups rather than key groups vary fastest along the invocation index
/// (`ROW_FAST` in the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TiledShape {
    pub kg: u32,
    pub dc4: u32,
    pub subgroups: bool,
    pub row_fast: bool,
}

/// Which source variant a pipeline is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    pub elem: Elem,
    /// K and V read as vec4s (`kv_vec4.wgsl`), else one element at a time.
    pub vec4: bool,
    pub subgroups: bool,
    /// Output vec4 chunks per invocation.
    pub nv: u32,
}

impl TiledShape {
    /// Output vec4 chunks per invocation for Dv.
    fn nv(&self, dim_v: usize) -> u32 {
        vec4s(dim_v).div_ceil(self.kg)
    }

    /// vec4s of D per chunk, and of a Q/K row (a multiple of the chunk).
    fn chunks(&self, dim: usize) -> (u32, u32) {
        let d4 = vec4s(dim);
        if self.dc4 == 0 {
            (d4, d4)
        } else {
            (self.dc4, d4.next_multiple_of(self.dc4))
        }
    }

    /// Workgroup memory the kernel declares for `p`.
    fn shared_bytes(&self, p: &Problem) -> u64 {
        let (dc4, _) = self.chunks(p.dim);
        let kg = u64::from(self.kg);
        let keys = 4 * kg;
        let vec4s = ROWS * u64::from(dc4 + 1)
            + keys * u64::from(dc4 + 1)
            + keys * kg * u64::from(self.nv(p.dim_v))
            + keys * 16
            + 16 * kg;
        vec4s * 16 + 16
    }

    /// Whether this shape can run `p` on this device: head dims, subgroups, workgroup
    /// memory and size within bounds.
    pub(crate) fn fits(&self, ctx: &GpuContext, p: &Problem) -> bool {
        let l = &ctx.limits;
        let wg = 16 * self.kg;
        self.kg.is_power_of_two()
            && p.dim <= MAX_DIM
            && p.dim_v <= MAX_DIM
            && self.nv(p.dim_v) <= MAX_NV
            && (!self.subgroups || subgroup_sizes(ctx).is_some())
            && wg <= l.max_compute_invocations_per_workgroup
            && wg <= l.max_compute_workgroup_size_x
            && self.shared_bytes(p) <= u64::from(l.max_compute_workgroup_storage_size)
    }

    /// The override constants for `p`; `partial` for the first pass of split-KV.
    pub(crate) fn constants(&self, p: &Problem, partial: bool) -> Vec<(&'static str, f64)> {
        let (dc4, d4) = self.chunks(p.dim);
        vec![
            ("KG", f64::from(self.kg)),
            ("D4", f64::from(d4)),
            ("DC4", f64::from(dc4)),
            ("Q_RESIDENT", if self.dc4 == 0 { 1.0 } else { 0.0 }),
            ("PARTIAL", if partial { 1.0 } else { 0.0 }),
            ("ROW_FAST", if self.row_fast { 1.0 } else { 0.0 }),
        ]
    }

    /// The source variant for `p` with q, k and v stored as `elem`.
    pub(crate) fn variant(&self, ctx: &GpuContext, p: &Problem, elem: Elem) -> Variant {
        Variant {
            elem,
            vec4: vec4_reads(ctx, p, elem),
            subgroups: self.subgroups,
            nv: self.nv(p.dim_v).clamp(1, MAX_NV),
        }
    }
}

/// The kernel of `variant`, generated on first use and kept for the process.
pub(crate) fn spec(variant: Variant) -> &'static KernelSpec {
    static SPECS: OnceLock<Mutex<HashMap<Variant, &'static KernelSpec>>> = OnceLock::new();
    generated_spec(&SPECS, variant, |v| (name(v), source(v)))
}

/// The kernel's name for `v`, as the pipeline cache and the kernel table know it.
pub(crate) fn name(v: Variant) -> String {
    format!(
        "fused_tiled_{}{}{}_nv{}",
        v.elem.name(),
        if v.vec4 { "_vec4" } else { "" },
        if v.subgroups { "_subgroups" } else { "" },
        v.nv
    )
}

const KERNEL: &str = crate::gpu::kernels::wgsl::shader_file!("kernels/fused_tiled.wgsl");

/// With subgroups: the reduction by shuffles over the KG invocations of a row group
/// (xor distances below KG, which the check in main proved are in the subgroup).
const SG_REDUCE: &str = "fn reduce_subgroup(x: vec4<f32>, take_max: bool) -> vec4<f32> {
    var y = x;
    for (var m = 1u; m < KG; m <<= 1u) {
        let o = subgroupShuffleXor(y, m * KG_STRIDE);
        y = select(y + o, max(y, o), take_max);
    }
    return y;
}";

/// Without subgroups main never calls it (use_sg is false).
const NO_SG_REDUCE: &str = "fn reduce_subgroup(x: vec4<f32>, take_max: bool) -> vec4<f32> {
    return x;
}";

/// Whether the subgroup holds every row group's invocations at the xor distances the
/// shuffles use: the subgroup has at least KG invocations and a shuffle by each
/// distance (masked to the subgroup, so it always names a lane) reaches li ^ m. Any
/// invocation that disagrees sends the whole workgroup to workgroup memory.
const SG_CHECK: &str = "    var lanes_ok = sg_size >= KG * KG_STRIDE;
    for (var m = 1u; m < KG; m <<= 1u) {
        let d = m * KG_STRIDE;
        let got = subgroupShuffleXor(li, d & (sg_size - 1u));
        lanes_ok = lanes_ok && got == (li ^ d);
    }
    if !lanes_ok {
        atomicStore(&sg_fail, 1u);
    }
    workgroupBarrier();
    if li == 0u {
        sg_flag = select(1u, 0u, atomicLoad(&sg_fail) != 0u);
    }";

const NO_SG_CHECK: &str = "    if li == 0u {
        sg_flag = 0u;
    }";

/// The full source of `v` (the generated-variant recipe of [`crate::gpu::kernels::wgsl`]):
/// the subgroup prelude when the variant uses subgroups, the preludes of fused.wgsl,
/// the chunk count, then the kernel template with its subgroup holes filled and its `$n`
/// lines expanded.
pub(crate) fn source(v: Variant) -> String {
    let mut out = String::new();
    if v.subgroups {
        out.push_str(subgroups::PRELUDE);
    }
    out.push_str(row_kernel_preludes(v.elem, v.vec4));
    out.push_str(&format!("const NV: u32 = {}u;\n", v.nv));
    let (reduce, builtins, check) = if v.subgroups {
        (
            SG_REDUCE,
            "    @builtin(subgroup_size) sg_size: u32,",
            SG_CHECK,
        )
    } else {
        (NO_SG_REDUCE, "", NO_SG_CHECK)
    };
    let kernel = fill(
        KERNEL,
        &[
            ("SG_FN", reduce),
            ("SG_BUILTINS", builtins),
            ("SG_CHECK", check),
        ],
    );
    out.push_str(&expand(&kernel, v.nv));
    out
}

/// Repeats each line holding `$n` once per n < nv, and turns `$each(x)` into x for
/// every n, comma separated.
fn expand(text: &str, nv: u32) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.lines() {
        if let Some(at) = line.find("$each(") {
            let body_at = at + "$each(".len();
            let mut depth = 1;
            let mut end = body_at;
            for (i, ch) in line[body_at..].char_indices() {
                match ch {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = body_at + i;
                    break;
                }
            }
            let body = &line[body_at..end];
            let list: Vec<String> = (0..nv)
                .map(|n| body.replace("$n", &n.to_string()))
                .collect();
            out.push_str(&line[..at]);
            out.push_str(&list.join(", "));
            out.push_str(&line[end + 1..]);
            out.push('\n');
        } else if line.contains("$n") {
            for n in 0..nv {
                out.push_str(&line.replace("$n", &n.to_string()));
                out.push('\n');
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every source variant, for the kernel table.
pub(crate) fn all_variants() -> Vec<Variant> {
    let mut all = Vec::new();
    for elem in [Elem::F32, Elem::F16] {
        for vec4 in [false, true] {
            for subgroups in [false, true] {
                for nv in 1..=MAX_NV {
                    all.push(Variant {
                        elem,
                        vec4,
                        subgroups,
                        nv,
                    });
                }
            }
        }
    }
    all
}
