//! Launcher for `shaders/kernels/fused_lanes.wgsl`: the fused flash-attention kernel for
//! adapters whose subgroups are a CPU's SIMD lanes (lavapipe). A workgroup
//! is one subgroup; each invocation owns `rows` query rows; keys are shared across lanes
//! by subgroup broadcasts. Same bindings, options and partial output as fused.wgsl.
//!
//! The kernel's `main` is written here per variant: the loops over rows, over the keys
//! of a block and over vec4 columns are unrolled into named variables, which is what
//! keeps everything but the key loop in SIMD registers on those drivers.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::key_loop::{generated_spec, row_kernel_preludes, vec4_reads, vec4s};
use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::subgroups::{self, subgroup_sizes};
use crate::gpu::kernels::wgsl::fill;
use crate::problem::Problem;

/// Largest D and Dv the kernel handles (its rows are unrolled in the source).
pub(crate) const MAX_DIM: usize = 128;

/// Subgroup sizes the kernel is offered for: the lanes of a workgroup, and the keys of
/// one block. Only 8 (lavapipe's, where it is tested and measured): the source is written
/// for any multiple of 4, but SwiftShader's 4-lane Vulkan compiles the unrolled source so
/// slowly that its tests did not finish, so it is not offered there untested.
const SIZES: [u32; 1] = [8];

/// vec4s of Q (or of the output) one invocation may hold: rows x vec4s of a row. Past
/// a few dozen they live on the driver's stack either way; the bound keeps that stack
/// (Q, output and one block's broadcast K and V) within a CPU core's L2 cache.
const MAX_REG4: u32 = 256;

/// rows x vec4s past which a variant takes the driver minutes, not seconds, to compile
/// when its shader cache is cold. Measured on Mesa 22.3's lavapipe at D = 64 (2 cores):
/// 4 rows about 11 s, 8 rows 38 s, 16 rows 170 s the first time; a later process loads
/// the build from Mesa's disk cache in 1, 2.5 and 5 s. The compile time grows about as
/// the square of the unrolled body, and the larger variants gain 10 to 25 % per call, so
/// the tuner times them only where calls are long enough to repay that
/// ([`SLOW_COMPILE_FROM_LEN`]).
const QUICK_REG4: u32 = 128;

/// Query and key lengths from which the tuner also times variants past [`QUICK_REG4`].
pub(crate) const SLOW_COMPILE_FROM_LEN: usize = 1024;

/// One configuration: the subgroup size it is built for (it fits only where the
/// adapter's subgroups are exactly that wide) and query rows per invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LanesShape {
    pub sg: u32,
    pub rows: u32,
}

/// Which source a pipeline is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    pub elem: Elem,
    /// K and V read as vec4s (`kv_vec4.wgsl`), else one element at a time.
    pub vec4: bool,
    pub sg: u32,
    pub rows: u32,
    /// vec4s of a Q/K row and of a V/output row (see [`vec4s`]).
    pub d4: u32,
    pub dv4: u32,
}

/// The adapter's subgroup size where it is fixed (smallest and largest agree) and one
/// the kernel is built for; `None` without subgroups (and on the web, where shaders
/// cannot enable them yet).
pub(crate) fn lanes_size(ctx: &GpuContext) -> Option<u32> {
    let (lo, hi) = subgroup_sizes(ctx)?;
    (lo == hi && SIZES.contains(&lo) && quick_compiler(ctx)).then_some(lo)
}

/// Whether the driver compiles the kernel's unrolled source in reasonable time: measured
/// on lavapipe with a cold shader cache at D = 64 and 4 rows per invocation, Mesa 22.3
/// takes about 11 s, Mesa 25.0 69 s (a minute's first call is no speed-up), so only
/// Mesa 22's llvmpipe is offered it.
fn quick_compiler(ctx: &GpuContext) -> bool {
    let info = ctx.adapter_info();
    info.driver == "llvmpipe" && info.driver_info.contains("Mesa 22.")
}

impl LanesShape {
    /// Whether this shape can run `p` on this device: the adapter's fixed subgroup size
    /// is `sg`, head dims within [`MAX_DIM`], the rows' registers within bounds.
    pub(crate) fn fits(&self, ctx: &GpuContext, p: &Problem) -> bool {
        let l = &ctx.limits;
        lanes_size(ctx) == Some(self.sg)
            && p.dim <= MAX_DIM
            && p.dim_v <= MAX_DIM
            && ROW_CHOICES.contains(&self.rows)
            && self.reg4(p) <= MAX_REG4
            && self.sg <= l.max_compute_invocations_per_workgroup
            && self.sg <= l.max_compute_workgroup_size_x
    }

    /// vec4s of Q (or of the output) one invocation holds for `p`: rows x the wider of a
    /// Q and an output row (what [`MAX_REG4`] and [`QUICK_REG4`] bound).
    fn reg4(&self, p: &Problem) -> u32 {
        self.rows.saturating_mul(vec4s(p.dim).max(vec4s(p.dim_v)))
    }

    /// Whether the tuner should compile and time this shape for `p` (see
    /// [`QUICK_REG4`]): quick-to-compile shapes always, the others for long problems.
    pub(crate) fn worth_timing(&self, p: &Problem) -> bool {
        self.reg4(p) <= QUICK_REG4
            || (p.len_q >= SLOW_COMPILE_FROM_LEN && p.len_k >= SLOW_COMPILE_FROM_LEN)
    }

    /// The override constants; `partial` for the first pass of split-KV.
    pub(crate) fn constants(&self, partial: bool) -> Vec<(&'static str, f64)> {
        vec![("PARTIAL", if partial { 1.0 } else { 0.0 })]
    }

    /// Rows one workgroup covers.
    pub(crate) fn tile_rows(&self) -> u64 {
        u64::from(self.sg) * u64::from(self.rows)
    }

    /// The source variant for `p` with q, k and v stored as `elem`.
    pub(crate) fn variant(&self, ctx: &GpuContext, p: &Problem, elem: Elem) -> Variant {
        Variant {
            elem,
            vec4: vec4_reads(ctx, p, elem),
            sg: self.sg,
            rows: self.rows,
            d4: vec4s(p.dim),
            dv4: vec4s(p.dim_v),
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
        "fused_lanes_{}{}_sg{}_r{}_d{}_dv{}",
        v.elem.name(),
        if v.vec4 { "_vec4" } else { "" },
        v.sg,
        v.rows,
        v.d4,
        v.dv4,
    )
}

const KERNEL: &str = crate::gpu::kernels::wgsl::shader_file!("kernels/fused_lanes.wgsl");

/// The full source of `v` (the generated-variant recipe of [`crate::gpu::kernels::wgsl`]):
/// the subgroup prelude, the preludes fused_tiled.wgsl takes, then the kernel template
/// with its `MAIN` hole filled.
pub(crate) fn source(v: Variant) -> String {
    let mut out = String::from(subgroups::PRELUDE);
    out.push_str(row_kernel_preludes(v.elem, v.vec4));
    out.push_str(&fill(KERNEL, &[("MAIN", &main_fn(v))]));
    out
}

/// `n` terms joined by `sep`, each from `f`.
fn join(n: u32, sep: &str, f: impl Fn(u32) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join(sep)
}

/// The component of a vec4 by index.
fn comp(i: u32) -> char {
    ['x', 'y', 'z', 'w'][(i % 4) as usize]
}

/// The kernel's entry point for `v`, every loop but the key loop unrolled.
fn main_fn(v: Variant) -> String {
    let (sg, rows, d4, dv4) = (v.sg, v.rows, v.d4, v.dv4);
    let groups = sg / 4;
    let mut s = String::new();
    let mut w = |line: String| {
        s.push_str(&line);
        s.push('\n');
    };
    w(format!("const SG: u32 = {sg}u;"));
    w(format!("const ROWS: u32 = {}u;", sg * rows));
    w(String::new());
    w(format!("@compute @workgroup_size({sg})"));
    w("fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_id: u32,
) {
    let tile = tile_of(linear_workgroup(wid, nwg), ROWS);
    // Uniform across the workgroup.
    if !tile.valid {
        return;
    }
    // Broadcasts from lane c must read invocation c's values: one subgroup, in order.
    let lanes_ok = subgroupAll(sg_size == SG && sg_id == li);
    let kv_len = batch_len_k(tile.b);
    let keys = key_range(tile, ROWS, kv_len);
    let kend = keys.kend;
    let no_mask = params.mask_kind == MASK_NONE;
    let causal = (params.flags & FLAG_CAUSAL) != 0u;
    let ninf = neg_inf();
    let pinf = -ninf;
    // This invocation's rows: li + SG r."
        .into());
    for r in 0..rows {
        w(format!("    let t{r} = tile.t0 + li + {r}u * SG;"));
        w(format!(
            "    let row{r} = row_of(t{r}, tile.heads_lo, tile.nh);"
        ));
        w(format!("    let live{r} = t{r} < tile.nrows;"));
        w(format!("    let i{r} = params.row_start + row{r}.lrow;"));
        // The keys row r may attend by structure (window, causal), as in masking.wgsl's
        // structurally_allowed; key lengths are in kend. Positions and reaches stay
        // inside i32 (see MAX_SEQ_LEN and the window clamp in params.rs).
        w(format!("    let p{r} = i32(i{r}) + params.pos_offset;"));
        w(format!("    let lo{r} = vec4(p{r} - params.win_left);"));
        w(format!(
            "    let hi{r} = vec4(select(p{r} + params.win_right, min(p{r} + params.win_right, p{r}), causal));"
        ));
        for d in 0..d4 {
            w(format!(
                "    let q{r}_{d} = load_q4(t{r}, tile.nrows, tile.heads_lo, tile.nh, {d}u);"
            ));
        }
        for e in 0..dv4 {
            w(format!("    var o{r}_{e} = vec4(0.0);"));
        }
        w(format!("    var m{r} = ninf;"));
        w(format!("    var l{r} = 0.0;"));
        w(format!("    var bad{r} = false;"));
    }
    w("    let kbase = tile.kv * params.len_k;
    // As in fused.wgsl: blocks start on an SG boundary at or below lo, within the split.
    var j0 = u32(max(keys.lo, 0) / i32(SG)) * SG;
    // Without an explicit mask every block from fast_from on takes the fast loop, which
    // hands a block whose V holds a NaN or an infinity back to the general loop (rare:
    // rows that see it are NaN). With one, the general loop takes every block.
    var fast_from = select(0xffffffffu, j0, no_mask);
    loop {
        for (; i32(j0) < keys.hi && j0 < fast_from; j0 += SG) {"
        .into());
    block_loads(&mut w, v, "            ");
    block_scores(&mut w, v, "            ");
    w("            // Rows past what exists and keys not allowed become -inf.".into());
    for r in 0..rows {
        for g in 0..groups {
            w(format!(
                "            x{r}_{g} = mask4(live{r}, row{r}.bh, i{r}, j0 + {}u, 1u, kend, x{r}_{g});",
                4 * g
            ));
        }
    }
    block_softmax(&mut w, v, "            ");
    let finite = join(dv4, " && ", |e| format!("all_finite(v_{e})"));
    w(format!("            if subgroupAll({finite}) {{"));
    block_pv(&mut w, v, "                ", false);
    w("            } else {".into());
    w("                // A NaN or infinity in V: keys of weight exactly 0 add nothing.".into());
    block_pv(&mut w, v, "                ", true);
    w("            }".into());
    w("        }
        if i32(j0) >= keys.hi {
            break;
        }
        // The fast loop: no branch in its body but the hand-back. Keys not allowed (by
        // position against each row's reach, the rule of masking.wgsl's
        // structurally_allowed four keys at a time; key lengths are in kend) and rows past
        // what exists become -inf.
        for (; i32(j0) < keys.hi; j0 += SG) {"
        .into());
    block_loads(&mut w, v, "            ");
    w(format!("            if !subgroupAll({finite}) {{"));
    w("                break;".into());
    w("            }".into());
    block_scores(&mut w, v, "            ");
    w("            let kv = vec4(i32(j0)) + vec4(0, 1, 2, 3);".into());
    for r in 0..rows {
        for g in 0..groups {
            w(format!("            let j{r}_{g} = kv + vec4({});", 4 * g));
            w(format!(
                "            x{r}_{g} = select(vec4(ninf), x{r}_{g}, (j{r}_{g} >= lo{r}) & (j{r}_{g} <= hi{r}) & (j{r}_{g} < vec4(kend)) & vec4(live{r}));"
            ));
        }
    }
    block_softmax(&mut w, v, "            ");
    block_pv(&mut w, v, "            ", false);
    w("        }
        fast_from = j0 + SG;
    }"
    .into());
    w("    // Rows past the tile's rows are not written.".into());
    for r in 0..rows {
        w(format!("    if live{r} {{"));
        w(format!("        let bad = bad{r} || !lanes_ok;"));
        w(format!("        let empty = is_neg_inf(m{r});"));
        for e in 0..dv4 {
            w(format!(
                "        store_chunk(row{r}, tile.sidx, {e}u, m{r}, l{r}, bad, empty, o{r}_{e});"
            ));
        }
        w("    }".into());
    }
    w("}".into());
    s
}

/// Loads this lane's key j0 + li of K and V; keys past the split, the batch's length or
/// Lk load as zeros (and are masked).
fn block_loads(w: &mut impl FnMut(String), v: Variant, ind: &str) {
    w(format!("{ind}let kj = j0 + li;"));
    for d in 0..v.d4 {
        w(format!("{ind}var k_{d} = vec4(0.0);"));
    }
    for e in 0..v.dv4 {
        w(format!("{ind}var v_{e} = vec4(0.0);"));
    }
    w(format!("{ind}if i32(kj) < kend {{"));
    for d in 0..v.d4 {
        w(format!("{ind}    k_{d} = load_k4(kbase + kj, {d}u);"));
    }
    for e in 0..v.dv4 {
        w(format!("{ind}    v_{e} = load_v4(kbase + kj, {e}u);"));
    }
    w(format!("{ind}}}"));
}

/// Every row's scores against keys j0 .. j0 + SG (K from lane c), scaled: x{r}_{g}
/// holds keys 4g .. 4g + 3.
fn block_scores(w: &mut impl FnMut(String), v: Variant, ind: &str) {
    for c in 0..v.sg {
        for d in 0..v.d4 {
            w(format!(
                "{ind}let kc{c}_{d} = subgroupBroadcast(k_{d}, {c}u);"
            ));
        }
        for r in 0..v.rows {
            let mut acc = format!("q{r}_0 * kc{c}_0");
            for d in 1..v.d4 {
                acc = format!("fma(q{r}_{d}, kc{c}_{d}, {acc})");
            }
            w(format!("{ind}let a{r}_{c} = {acc};"));
        }
    }
    for r in 0..v.rows {
        for g in 0..v.sg / 4 {
            let sums = join(4, ", ", |i| format!("hsum(a{r}_{})", 4 * g + i));
            w(format!("{ind}var x{r}_{g} = vec4({sums}) * params.scale;"));
        }
    }
}

/// The online softmax step: bad flags, new maxima, rescale factors al{r}, weights
/// p{r}_{g}, sums.
fn block_softmax(w: &mut impl FnMut(String), v: Variant, ind: &str) {
    let groups = v.sg / 4;
    // A NaN or +inf logit makes its row NaN; it takes no part in the maximum.
    for r in 0..v.rows {
        for g in 0..groups {
            w(format!(
                "{ind}let b{r}_{g} = nan4(x{r}_{g}) | (x{r}_{g} == vec4(pinf));"
            ));
        }
        let any = join(groups, " || ", |g| format!("any(b{r}_{g})"));
        w(format!("{ind}bad{r} = bad{r} || {any};"));
        let mut mx = format!("hmax(select(x{r}_0, vec4(ninf), b{r}_0))");
        for g in 1..groups {
            mx = format!("max({mx}, hmax(select(x{r}_{g}, vec4(ninf), b{r}_{g})))");
        }
        w(format!("{ind}let mn{r} = max(m{r}, {mx});"));
        // No allowed key yet: nothing to rescale, and every weight is 0.
        w(format!("{ind}let none{r} = is_neg_inf(mn{r});"));
        w(format!(
            "{ind}let al{r} = select(exp2((m{r} - mn{r}) * LOG2E), 1.0, none{r});"
        ));
        for g in 0..groups {
            w(format!(
                "{ind}let p{r}_{g} = probs4(x{r}_{g}, mn{r}, none{r});"
            ));
        }
        let sums = join(groups, " + ", |g| format!("hsum(p{r}_{g})"));
        w(format!("{ind}l{r} = l{r} * al{r} + ({sums});"));
        w(format!("{ind}m{r} = mn{r};"));
    }
}

/// Out = al * out + P · V, V from lane c; `guarded`: weights of exactly 0 add nothing.
fn block_pv(w: &mut impl FnMut(String), v: Variant, ind: &str, guarded: bool) {
    for c in 0..v.sg {
        for e in 0..v.dv4 {
            w(format!(
                "{ind}let vc{c}_{e} = subgroupBroadcast(v_{e}, {c}u);"
            ));
        }
    }
    let weight = |r: u32, c: u32| format!("p{r}_{}.{}", c / 4, comp(c));
    for r in 0..v.rows {
        for e in 0..v.dv4 {
            let mut acc = format!("o{r}_{e} * al{r}");
            for c in 0..v.sg {
                acc = if guarded {
                    format!("add_guarded({acc}, {}, vc{c}_{e})", weight(r, c))
                } else {
                    format!("fma(vec4({}), vc{c}_{e}, {acc})", weight(r, c))
                };
            }
            w(format!("{ind}o{r}_{e} = {acc};"));
        }
    }
}

/// Query rows per invocation the candidates may use (`tune/candidates.rs`; `fits` refuses
/// any other, so that the kernel table lists every variant the launcher can make).
pub(crate) const ROW_CHOICES: [u32; 3] = [4, 8, 16];

/// Every variant the launcher can make, for the kernel table: both storage types, both
/// K/V readings, every subgroup size and row choice, and every pair of rounded head dims
/// up to [`MAX_DIM`] within [`MAX_REG4`].
pub(crate) fn all_variants() -> Vec<Variant> {
    let mut dims: Vec<u32> = (1..=MAX_DIM).map(vec4s).collect();
    dims.dedup();
    let mut all = Vec::new();
    for elem in [Elem::F32, Elem::F16] {
        for vec4 in [false, true] {
            for sg in SIZES {
                for rows in ROW_CHOICES {
                    for &d4 in &dims {
                        for &dv4 in &dims {
                            if rows * d4.max(dv4) <= MAX_REG4 {
                                all.push(Variant {
                                    elem,
                                    vec4,
                                    sg,
                                    rows,
                                    d4,
                                    dv4,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::validate;

    fn problem(l: usize, d: usize) -> Problem {
        validate(
            &[1, 2, l, d],
            &[1, 2, l, d],
            &[1, 2, l, d],
            &Default::default(),
        )
        .unwrap()
    }

    #[test]
    fn slow_compiling_shapes_are_timed_only_for_long_problems() {
        let lanes = |rows| LanesShape { sg: 8, rows };
        // D = 64: 16 vec4s a row. 4 and 8 rows always; 16 rows from 1,024 on.
        for l in [1, 128, 512, 1023] {
            assert!(lanes(4).worth_timing(&problem(l, 64)), "4 rows, L {l}");
            assert!(lanes(8).worth_timing(&problem(l, 64)), "8 rows, L {l}");
            assert!(!lanes(16).worth_timing(&problem(l, 64)), "16 rows, L {l}");
        }
        assert!(lanes(16).worth_timing(&problem(1024, 64)));
        // D = 128: 8 rows is as large as 16 at D = 64.
        assert!(lanes(4).worth_timing(&problem(512, 128)));
        assert!(!lanes(8).worth_timing(&problem(512, 128)));
        assert!(lanes(8).worth_timing(&problem(2048, 128)));
        // Queries and keys must both be long.
        let p = validate(
            &[1, 1, 4, 64],
            &[1, 1, 4096, 64],
            &[1, 1, 4096, 64],
            &Default::default(),
        );
        assert!(!lanes(16).worth_timing(&p.unwrap()));
    }
}
