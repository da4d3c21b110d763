// Fused flash attention as GEMM micro-tiles: the same computation, options and row rule
// as fused.wgsl (see there and src/reference.rs), shaped for hardware GPUs. With PARTIAL
// it is the first pass of split-KV over key ranges, as fused.wgsl is.
//
// Tile. A workgroup owns 64 rows (packed from the query heads that read one K/V head,
// as in fused.wgsl) and walks their keys KEYS = 4 * KG at a time with 16 * KG
// invocations. Invocation (rg, kg) (see ROW_FAST for how li maps to them) computes a 4 x 4 block of scores,
// rows rg + 16 r (r < 4) against keys kg + KG c (c < 4), and owns the same rows' output
// columns, vec4 chunks kg + KG n (n < NV). Rows and keys are interleaved that way so
// that neighbouring invocations read neighbouring vec4s of workgroup memory.
//
// Data. Q and K go through workgroup memory in chunks of DC4 vec4s along D (the GEMM's
// k-loop); with Q_RESIDENT the whole of Q fits and is loaded once. V and the
// probabilities P of a tile go through workgroup memory too, P as one vec4 per key and
// row group (the 4 rows of an invocation). Row strides of Q and K are padded by one vec4
// against bank conflicts.
//
// Softmax. Scores stay in natural units, so that an additive bias adds exactly as in the
// reference, differences of large logits stay exact, and every mask kind gives the same
// bits; each difference from the row maximum is scaled by log2(e) for one exp2. The row maximum of a tile is reduced over the KG invocations
// that share the row: with subgroup shuffles where the source enables subgroups and the
// subgroup holds those invocations at xor distances (checked at run time, for any
// subgroup size), through workgroup memory otherwise. Row sums stay partial per
// invocation (they rescale alike) and are reduced once at the end.
//
// A template (see src/gpu/kernels/wgsl.rs): the Rust side (src/gpu/kernels/fused_tiled.rs)
// fills the holes SG_FN, SG_BUILTINS and SG_CHECK per variant and expands every line
// holding `$n` once per output chunk n < NV, so that micro-tiles are named variables: no
// private array is indexed at run time, and every loop has a constant trip count.

// Key groups: invocations sharing a row; the workgroup has 16 * KG invocations and
// 4 * KG keys per tile. A power of two.
override KG: u32 = 8u;
// vec4s of a Q and K row, a multiple of DC4 (columns past D are zeros).
override D4: u32 = 16u;
// vec4s per chunk of D staged at once.
override DC4: u32 = 16u;
// Q stays in workgroup memory for the whole key loop (DC4 == D4).
override Q_RESIDENT: bool = true;
// Write partials for combine.wgsl instead of the output.
override PARTIAL: bool = false;
// Which index varies fastest along local_invocation_index: the key group (false: a row
// group's KG invocations are neighbours, and can reduce by subgroup shuffles) or the
// row group (true: neighbours share their K and V reads, which drivers that run
// neighbouring invocations as SIMD lanes turn into one broadcast load).
override ROW_FAST: bool = false;
// Distance along local_invocation_index between a row group's invocations.
override KG_STRIDE: u32 = select(1u, 16u, ROW_FAST);

const ROWS: u32 = 64u;
const LOG2E: f32 = 1.4426950408889634;

// vec4s of a V row held in workgroup memory: NV chunks per key group (NV is a constant
// the Rust side puts before the kernel).
override DV4T: u32 = KG * NV;

var<workgroup> q_sh: array<vec4<f32>, ROWS * (DC4 + 1u)>;
var<workgroup> k_sh: array<vec4<f32>, 4u * KG * (DC4 + 1u)>;
var<workgroup> v_sh: array<vec4<f32>, 4u * KG * DV4T>;
var<workgroup> p_sh: array<vec4<f32>, 4u * KG * 16u>;
// Per-invocation partial maxima (or sums) for the reduction through workgroup memory.
var<workgroup> red: array<vec4<f32>, 16u * KG>;
var<workgroup> kv_len_shared: u32;
var<workgroup> sg_fail: atomic<u32>;
var<workgroup> sg_flag: u32;
// Set when the current V tile holds a NaN or an infinity; two, used alternately, as in
// fused.wgsl.
var<workgroup> v_nonfinite: array<atomic<u32>, 2>;

// Per-row values of one invocation (component r for row rg + 16 r) reduced over the KG
// invocations of its row group through workgroup memory; `take_max` picks max over sum.
// Called by every invocation (it has barriers).
fn reduce_shared(x: vec4<f32>, rg: u32, kg: u32, take_max: bool) -> vec4<f32> {
    workgroupBarrier();
    red[rg * KG + kg] = x;
    workgroupBarrier();
    var y = red[rg * KG];
    for (var g = 1u; g < KG; g++) {
        let o = red[rg * KG + g];
        y = select(y + o, max(y, o), take_max);
    }
    return y;
}

// As reduce_shared, with subgroup shuffles; only when the check in main passed.
SG_FN

@compute @workgroup_size(16u * KG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
SG_BUILTINS
) {
    let wg = 16u * KG;
    let keys_per_tile = 4u * KG;
    let tile = tile_of(linear_workgroup(wid, nwg), ROWS);
    // Uniform across the workgroup.
    if !tile.valid {
        return;
    }
    let rg = select(li / KG, li % 16u, ROW_FAST);
    let kg = select(li % KG, li / 16u, ROW_FAST);
    let heads_lo = tile.heads_lo;
    let nh = tile.nh;
    let nrows = tile.nrows;
    let t0 = tile.t0;

    if li == 0u {
        kv_len_shared = batch_len_k(tile.b);
        atomicStore(&v_nonfinite[0], 0u);
        atomicStore(&v_nonfinite[1], 0u);
        atomicStore(&sg_fail, 0u);
    }
    workgroupBarrier();
SG_CHECK
    let kv_len = workgroupUniformLoad(&kv_len_shared);
    let use_sg = workgroupUniformLoad(&sg_flag) != 0u;
    let keys = key_range(tile, ROWS, kv_len);
    let kend = keys.kend;
    let no_mask = params.mask_kind == MASK_NONE;
    // Scores and maxima in natural units (see the top); differences go to log2 for exp2.
    let scale2 = params.scale;
    let to_log2 = LOG2E;

    // This invocation's rows: rg + 16 r.
    let t_0 = t0 + rg;
    let t_1 = t0 + rg + 16u;
    let t_2 = t0 + rg + 32u;
    let t_3 = t0 + rg + 48u;
    let row0 = row_of(t_0, heads_lo, nh);
    let row1 = row_of(t_1, heads_lo, nh);
    let row2 = row_of(t_2, heads_lo, nh);
    let row3 = row_of(t_3, heads_lo, nh);

    if Q_RESIDENT {
        for (var e = li; e < ROWS * D4; e += wg) {
            let r = e / D4;
            let d4 = e % D4;
            q_sh[r * (DC4 + 1u) + d4] = load_q4(t0 + r, nrows, heads_lo, nh, d4);
        }
    }

    var m_run = vec4(neg_inf());
    var l_run = vec4(0.0);
    var bad = vec4(false);
    var o_$n = mat4x4<f32>();

    var parity = 0u;
    let kbase = tile.kv * params.len_k;
    // As in fused.wgsl: tiles start on a KEYS boundary at or below lo, within the split.
    for (var j0 = u32(max(keys.lo, 0) / i32(keys_per_tile)) * keys_per_tile;
        i32(j0) < keys.hi; j0 += keys_per_tile) {
        var s0 = vec4(0.0);
        var s1 = vec4(0.0);
        var s2 = vec4(0.0);
        var s3 = vec4(0.0);
        var nonfinite = false;
        for (var c0 = 0u; c0 < D4; c0 += DC4) {
            // Every invocation is done reading the previous chunk or tile.
            workgroupBarrier();
            if !Q_RESIDENT {
                for (var e = li; e < ROWS * DC4; e += wg) {
                    let r = e / DC4;
                    let d4 = e % DC4;
                    q_sh[r * (DC4 + 1u) + d4] = load_q4(t0 + r, nrows, heads_lo, nh, c0 + d4);
                }
            }
            for (var e = li; e < keys_per_tile * DC4; e += wg) {
                let j = e / DC4;
                let d4 = e % DC4;
                var x = vec4(0.0);
                // Keys past this split (and the batch's length, and Lk) load as zeros;
                // such keys are masked. load_k4 zeroes the padding past D.
                if i32(j0 + j) < kend {
                    x = load_k4(kbase + j0 + j, c0 + d4);
                }
                k_sh[j * (DC4 + 1u) + d4] = x;
            }
            if c0 == 0u {
                for (var e = li; e < keys_per_tile * DV4T; e += wg) {
                    let j = e / DV4T;
                    var x = vec4(0.0);
                    // As above, for V and Dv.
                    if i32(j0 + j) < kend {
                        x = load_v4(kbase + j0 + j, e % DV4T);
                    }
                    nonfinite = nonfinite || !all_finite(x);
                    v_sh[e] = x;
                }
                if nonfinite {
                    atomicOr(&v_nonfinite[parity], 1u);
                }
            }
            workgroupBarrier();
            // Scores += Q chunk · K chunkᵀ, 4 rows x 4 keys.
            for (var d4 = 0u; d4 < DC4; d4++) {
                let kt = mat4x4(
                    k_sh[kg * (DC4 + 1u) + d4],
                    k_sh[(kg + KG) * (DC4 + 1u) + d4],
                    k_sh[(kg + 2u * KG) * (DC4 + 1u) + d4],
                    k_sh[(kg + 3u * KG) * (DC4 + 1u) + d4],
                );
                s0 += q_sh[rg * (DC4 + 1u) + d4] * kt;
                s1 += q_sh[(rg + 16u) * (DC4 + 1u) + d4] * kt;
                s2 += q_sh[(rg + 32u) * (DC4 + 1u) + d4] * kt;
                s3 += q_sh[(rg + 48u) * (DC4 + 1u) + d4] * kt;
            }
        }
        // Cleared for the tile after next; nobody reads it until then.
        if li == 0u {
            atomicStore(&v_nonfinite[1u - parity], 0u);
        }
        let v_clean = atomicLoad(&v_nonfinite[parity]) == 0u;
        parity = 1u - parity;

        let full_tile = no_mask && i32(j0) >= keys.full_lo && i32(j0 + keys_per_tile) <= keys.full_hi;
        if full_tile {
            s0 *= scale2;
            s1 *= scale2;
            s2 *= scale2;
            s3 *= scale2;
        } else {
            let i0 = params.row_start;
            let key0 = j0 + kg;
            s0 = mask4(t_0 < nrows, row0.bh, i0 + row0.lrow, key0, KG, kend, s0 * scale2);
            s1 = mask4(t_1 < nrows, row1.bh, i0 + row1.lrow, key0, KG, kend, s1 * scale2);
            s2 = mask4(t_2 < nrows, row2.bh, i0 + row2.lrow, key0, KG, kend, s2 * scale2);
            s3 = mask4(t_3 < nrows, row3.bh, i0 + row3.lrow, key0, KG, kend, s3 * scale2);
        }

        // A NaN or +inf logit makes its row NaN; it takes no part in the maximum.
        let inf = -neg_inf();
        let bad0 = nan4(s0) | (s0 == vec4(inf));
        let bad1 = nan4(s1) | (s1 == vec4(inf));
        let bad2 = nan4(s2) | (s2 == vec4(inf));
        let bad3 = nan4(s3) | (s3 == vec4(inf));
        bad = bad | vec4(any(bad0), any(bad1), any(bad2), any(bad3));
        let ninf = vec4(neg_inf());
        var tmax = vec4(
            hmax(select(s0, ninf, bad0)),
            hmax(select(s1, ninf, bad1)),
            hmax(select(s2, ninf, bad2)),
            hmax(select(s3, ninf, bad3)),
        );
        if use_sg {
            tmax = reduce_subgroup(tmax, true);
        } else {
            tmax = reduce_shared(tmax, rg, kg, true);
        }
        let m_new = max(m_run, tmax);
        // No allowed key yet: nothing to rescale, and every probability is 0.
        let none = bitcast<vec4<u32>>(m_new) == vec4(0xff800000u);
        let alpha = select(exp2((m_run - m_new) * to_log2), vec4(1.0), none);
        let p0 = select(exp2((s0 - m_new.x) * to_log2), vec4(0.0), none.x);
        let p1 = select(exp2((s1 - m_new.y) * to_log2), vec4(0.0), none.y);
        let p2 = select(exp2((s2 - m_new.z) * to_log2), vec4(0.0), none.z);
        let p3 = select(exp2((s3 - m_new.w) * to_log2), vec4(0.0), none.w);
        l_run = l_run * alpha + vec4(hsum(p0), hsum(p1), hsum(p2), hsum(p3));
        m_run = m_new;
        o_$n = mat4x4(o_$n[0] * alpha.x, o_$n[1] * alpha.y, o_$n[2] * alpha.z, o_$n[3] * alpha.w);
        // P by key, one vec4 for the 4 rows of a row group.
        p_sh[kg * 16u + rg] = vec4(p0.x, p1.x, p2.x, p3.x);
        p_sh[(kg + KG) * 16u + rg] = vec4(p0.y, p1.y, p2.y, p3.y);
        p_sh[(kg + 2u * KG) * 16u + rg] = vec4(p0.z, p1.z, p2.z, p3.z);
        p_sh[(kg + 3u * KG) * 16u + rg] = vec4(p0.w, p1.w, p2.w, p3.w);
        workgroupBarrier();

        // Out += P · V.
        if v_clean {
            for (var j = 0u; j < keys_per_tile; j++) {
                let p = p_sh[j * 16u + rg];
                let v_$n = v_sh[j * DV4T + $n * KG + kg];
                o_$n += mat4x4(p.x * v_$n, p.y * v_$n, p.z * v_$n, p.w * v_$n);
            }
        } else {
            // A NaN or infinity in V: keys of weight exactly 0 must add nothing.
            for (var j = 0u; j < keys_per_tile; j++) {
                let p = p_sh[j * 16u + rg];
                let z = p == vec4(0.0);
                let v_$n = v_sh[j * DV4T + $n * KG + kg];
                o_$n = mat4x4(select(o_$n[0] + p.x * v_$n, o_$n[0], z.x), select(o_$n[1] + p.y * v_$n, o_$n[1], z.y), select(o_$n[2] + p.z * v_$n, o_$n[2], z.z), select(o_$n[3] + p.w * v_$n, o_$n[3], z.w));
            }
        }
    }

    // Row sums and NaN flags over the row group's invocations.
    let bad_f = select(vec4(0.0), vec4(1.0), bad);
    var l_all: vec4<f32>;
    var bad_all: vec4<f32>;
    if use_sg {
        l_all = reduce_subgroup(l_run, false);
        bad_all = reduce_subgroup(bad_f, true);
    } else {
        l_all = reduce_shared(l_run, rg, kg, false);
        bad_all = reduce_shared(bad_f, rg, kg, true);
    }
    let badr = bad_all != vec4(0.0);
    let empty = bitcast<vec4<u32>>(m_run) == vec4(0xff800000u);

    store_row(t_0, row0, nrows, tile.sidx, kg, m_run.x, l_all.x, badr.x, empty.x, $each(o_$n[0]));
    store_row(t_1, row1, nrows, tile.sidx, kg, m_run.y, l_all.y, badr.y, empty.y, $each(o_$n[1]));
    store_row(t_2, row2, nrows, tile.sidx, kg, m_run.z, l_all.z, badr.z, empty.z, $each(o_$n[2]));
    store_row(t_3, row3, nrows, tile.sidx, kg, m_run.w, l_all.w, badr.w, empty.w, $each(o_$n[3]));
}

// Writes one row's share of this invocation: its output chunks (or partials), and from
// the row group's first invocation the row's lse (or m and l), through store_chunk.
fn store_row(
    t: u32,
    row: Row,
    nrows: u32,
    sidx: u32,
    kg: u32,
    m: f32,
    l: f32,
    bad: bool,
    empty: bool,
    o_$n: vec4<f32>,
) {
    // Rows past the tile's rows are not written.
    if t >= nrows {
        return;
    }
    store_chunk(row, sidx, $n * KG + kg, m, l, bad, empty, o_$n);
}
