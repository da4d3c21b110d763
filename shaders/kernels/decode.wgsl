// Split-KV decoding, first pass (flash-decoding): for short queries against long keys.
// Each workgroup takes one key range of one K/V head and writes, for each of its rows,
// the partial (unnormalised output, max m, sum l) that combine.wgsl merges.
//
// Why not fused.wgsl: there lanes are rows, and a decode step has few rows (the query
// heads of a group times a handful of positions), so most lanes would idle. Here lanes
// are keys. Per tile of WG keys:
//   1. scores: lane `li` takes key j0 + li and computes its logit against every row of
//      the workgroup (rows are broadcast from workgroup memory);
//   2. row maxima: one lane per row scans the tile and rescales the running state;
//   3. probabilities: each lane exponentiates its own key's logits;
//   4. weights·V: lane (kg, c4) accumulates columns 4 * c4 .. 4 * c4 + 3 of every row over
//      the tile's keys kg, kg + KEY_GROUPS, ...; the key groups' sums are added once, at
//      the end of the range.
// With Q_PRIVATE each lane copies the q rows into private memory once instead of
// reading them from workgroup memory for every key: on drivers that run lanes as SIMD on
// a CPU (llvmpipe) every lane's read of workgroup memory is its own scalar load, and
// those reads cost more than the K loads. On GPUs broadcast reads are cheap and the
// registers are better spent elsewhere.
// With PREFETCH_V each lane of step 1 also reads one element of every 64-byte line of its
// key's V row, so that step 4, which walks V one row at a time, finds it in cache: on
// llvmpipe that walk is otherwise bound by memory latency.
// Rows are packed as in fused.wgsl: virtual row t is position t / nh of head t % nh of
// the nh query heads that read this K/V head, so the heads of a group share each K and
// V row loaded.
//
// Row rule (src/reference.rs), as in fused.wgsl: a NaN or +inf logit makes the row's
// partial m NaN; a range with no allowed key leaves m = -inf, l = 0; a key whose weight
// is exactly 0 adds nothing, so a NaN in V behind a masked key never leaks.

// q, mask, key lengths and split come with tile.wgsl, k and v with kv_scalar.wgsl or
// kv_vec4.wgsl. `dst` holds the partials, or with DIRECT the output, and `lse` (only
// with DIRECT) the log-sum-exp.
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

// Invocations per workgroup, and keys per tile.
override WG: u32 = 64u;
// Rows per workgroup, at most ROWS_MAX.
override ROWS: u32 = 4u;
// Key groups of step 4; KEY_GROUPS * HEAD_DIM_V4 must not exceed WG.
override KEY_GROUPS: u32 = 1u;
// vec4s per row of q and k (D columns) and of v (Dv columns), padded as in fused.wgsl.
override HEAD_DIM4: u32 = 16u;
override HEAD_DIM_V4: u32 = 16u;
// vec4s of `rows4`: at least ROWS * HEAD_DIM4 and ROWS * KEY_GROUPS * HEAD_DIM_V4.
override SHARED4: u32 = 64u;
// See above; needs ROWS * HEAD_DIM4 at most Q4_PRIVATE.
override Q_PRIVATE: bool = false;
// See above.
override PREFETCH_V: bool = false;
// vec4s of V per 64-byte line: 4 for f32 storage, 8 for f16.
override LINE_V4: u32 = 4u;
// The workgroup's range is every key of its rows (one range per row): it writes the
// finished output and log-sum-exp, as fused.wgsl does, and no combine pass follows.
override DIRECT: bool = false;

const ROWS_MAX: u32 = 16u;
const Q4_PRIVATE: u32 = 64u;

// The workgroup's q rows during the key loop; the key groups' output sums after it.
var<workgroup> rows4: array<vec4<f32>, SHARED4>;
// Logits, then probabilities, of the current tile: row r, key j at r * WG + j. After the
// key loop, the key groups' sums l.
var<workgroup> tile_p: array<f32, ROWS * WG>;
var<workgroup> m_run: array<f32, ROWS_MAX>;
var<workgroup> alpha: array<f32, ROWS_MAX>;
var<workgroup> bad: array<u32, ROWS_MAX>;
var<workgroup> kv_len_shared: u32;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tile_rows = ROWS;
    let tile = tile_of(linear_workgroup(wid, nwg), tile_rows);
    // Uniform across the workgroup.
    if !tile.valid {
        return;
    }
    let kv = tile.kv;
    let heads_lo = tile.heads_lo;
    let nh = tile.nh;
    let nrows = tile.nrows;
    let t0 = tile.t0;

    if li == 0u {
        kv_len_shared = batch_len_k(tile.b);
    }
    if li < ROWS {
        m_run[li] = neg_inf();
        bad[li] = 0u;
    }
    for (var x = li; x < ROWS * HEAD_DIM4; x += WG) {
        let t = t0 + x / HEAD_DIM4;
        let c4 = x % HEAD_DIM4;
        var val = vec4(0.0);
        // Rows past the workgroup's rows and the padding past D hold zeros; such rows
        // are never written.
        if t < nrows {
            let row = row_of(t, heads_lo, nh);
            let qrow = (row.bh * params.len_q + params.row_start + row.lrow) * params.dim
                - params.q_base;
            for (var c = 0u; c < 4u; c++) {
                let d = 4u * c4 + c;
                if d < params.dim {
                    val[c] = f32(q[qrow + d]);
                }
            }
        }
        rows4[x] = val;
    }
    let kv_len = workgroupUniformLoad(&kv_len_shared);
    let keys = key_range(tile, tile_rows, kv_len);
    let kend = keys.kend;
    let lo = keys.lo;
    let hi = keys.hi;
    let full_lo = keys.full_lo;
    let full_hi = keys.full_hi;
    let no_mask = params.mask_kind == MASK_NONE;

    // Step 4's lane: key group kg, columns 4 * c4 ...; lanes past the groups only help
    // with steps 1 to 3.
    let c4 = li % HEAD_DIM_V4;
    let kg = li / HEAD_DIM_V4;
    let pv_lane = kg < KEY_GROUPS;
    var o_acc: array<vec4<f32>, ROWS_MAX>;
    var l_acc: array<f32, ROWS_MAX>;
    for (var r = 0u; r < ROWS; r++) {
        o_acc[r] = vec4(0.0);
        l_acc[r] = 0.0;
    }

    var q_reg: array<vec4<f32>, Q4_PRIVATE>;
    if Q_PRIVATE {
        for (var x = 0u; x < ROWS * HEAD_DIM4; x++) {
            q_reg[x] = rows4[x];
        }
    }
    let kbase = kv * params.len_k;
    // The sum of the PREFETCH_V reads, kept alive by a store that never happens.
    var touched = 0.0;
    // hi > lo bounds the loop; j0 starts on a WG boundary at or below lo, and never below
    // ks (a multiple of WG), so ranges do not overlap.
    for (var j0 = u32(max(lo, 0) / i32(WG)) * WG; i32(j0) < hi; j0 += WG) {
        // The previous tile's probabilities are consumed (and, the first time, the q
        // rows and running state are written).
        workgroupBarrier();
        // 1. Scores of this lane's key against every row.
        let key = j0 + li;
        let live = i32(key) < kend;
        // Zeroed explicitly: some compilers keep a loop-local var's value from the
        // previous iteration when it has no initializer.
        var acc: array<f32, ROWS_MAX>;
        for (var r = 0u; r < ROWS; r++) {
            acc[r] = 0.0;
        }
        if live {
            if PREFETCH_V {
                for (var e4 = 0u; e4 < HEAD_DIM_V4; e4 += LINE_V4) {
                    touched += load_v4(kbase + key, e4).x;
                }
            }
            for (var d4 = 0u; d4 < HEAD_DIM4; d4++) {
                let kd = load_k4(kbase + key, d4);
                for (var r = 0u; r < ROWS; r++) {
                    if Q_PRIVATE {
                        acc[r] += dot(q_reg[r * HEAD_DIM4 + d4], kd);
                    } else {
                        acc[r] += dot(rows4[r * HEAD_DIM4 + d4], kd);
                    }
                }
            }
        }
        let full_tile = no_mask && i32(j0) >= full_lo && i32(j0 + WG) <= full_hi;
        for (var r = 0u; r < ROWS; r++) {
            let t = t0 + r;
            var x = neg_inf();
            // Only existing rows and keys of this range below the batch's length reach
            // the rule (and the mask's binding).
            if live && t < nrows {
                x = params.scale * acc[r];
                if !full_tile {
                    let row = row_of(t, heads_lo, nh);
                    x = masked_logit(row.bh, params.row_start + row.lrow, key, x);
                }
            }
            tile_p[r * WG + li] = x;
        }
        workgroupBarrier();
        // 2. Row maxima and the rescale of the running state.
        if li < ROWS {
            var tmax = neg_inf();
            var nonfinite = false;
            for (var j = 0u; j < WG; j++) {
                let x = tile_p[li * WG + j];
                if is_nan(x) || x == -neg_inf() {
                    nonfinite = true;
                } else {
                    tmax = max(tmax, x);
                }
            }
            let m_old = m_run[li];
            let m_new = max(m_old, tmax);
            var a = 1.0;
            if m_new != neg_inf() {
                // exp(-inf) = 0 on the first allowed tile: nothing to rescale yet.
                a = exp(m_old - m_new);
            }
            m_run[li] = m_new;
            alpha[li] = a;
            if nonfinite {
                bad[li] = 1u;
            }
        }
        workgroupBarrier();
        // 3. Probabilities of this lane's key; -inf logits (not allowed) give exactly 0.
        for (var r = 0u; r < ROWS; r++) {
            let m = m_run[r];
            var p = 0.0;
            if m != neg_inf() {
                p = exp(tile_p[r * WG + li] - m);
            }
            tile_p[r * WG + li] = p;
        }
        workgroupBarrier();
        // 4. Out += P · V over this lane's keys of the tile.
        if pv_lane {
            for (var r = 0u; r < ROWS; r++) {
                o_acc[r] *= alpha[r];
                l_acc[r] *= alpha[r];
            }
            let n = u32(min(i32(WG), kend - i32(j0)));
            for (var jj = 0u; jj < n; jj += KEY_GROUPS) {
                // With one key group j stays uniform across lanes, so drivers that run
                // lanes as SIMD (llvmpipe) read each probability once, not per lane.
                let j = select(jj + kg, jj, KEY_GROUPS == 1u);
                if j >= n {
                    break;
                }
                let vd = load_v4(kbase + j0 + j, c4);
                for (var r = 0u; r < ROWS; r++) {
                    let p = tile_p[r * WG + j];
                    o_acc[r] = select(fma(vec4(p), vd, o_acc[r]), o_acc[r], p == 0.0);
                    l_acc[r] += p;
                }
            }
        }
    }

    // The key groups' sums, added once.
    workgroupBarrier();
    if pv_lane {
        for (var r = 0u; r < ROWS; r++) {
            rows4[(kg * ROWS + r) * HEAD_DIM_V4 + c4] = o_acc[r];
        }
        if c4 == 0u {
            for (var r = 0u; r < ROWS; r++) {
                tile_p[kg * ROWS + r] = l_acc[r];
            }
        }
    }
    workgroupBarrier();
    // The rows' output sums: the partials, or with DIRECT the finished output, by the
    // row rule (finish_out, finish_lse) as combine.wgsl would from this one range.
    for (var x = li; x < ROWS * HEAD_DIM_V4; x += WG) {
        let r = x / HEAD_DIM_V4;
        let e4 = x % HEAD_DIM_V4;
        let t = t0 + r;
        // Rows past the workgroup's rows are not written, nor columns past Dv.
        if t >= nrows || 4u * e4 >= params.dim_v {
            continue;
        }
        var sum = vec4(0.0);
        for (var g = 0u; g < KEY_GROUPS; g++) {
            sum += rows4[(g * ROWS + r) * HEAD_DIM_V4 + e4];
        }
        let row = row_of(t, heads_lo, nh);
        let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
        var base = (prow * split.splits + tile.sidx) * params.dim_v;
        if DIRECT {
            var l = 0.0;
            for (var g = 0u; g < KEY_GROUPS; g++) {
                l += tile_p[g * ROWS + r];
            }
            let y = sum / l;
            let empty = m_run[r] == neg_inf();
            let nan = bad[r] != 0u;
            sum = vec4(finish_out(y.x, nan, empty), finish_out(y.y, nan, empty),
                finish_out(y.z, nan, empty), finish_out(y.w, nan, empty));
            base = (row.bh * params.len_q + params.row_start + row.lrow) * params.dim_v
                - params.o_base;
        }
        for (var c = 0u; c < 4u; c++) {
            let e = 4u * e4 + c;
            if e < params.dim_v {
                dst[base + e] = sum[c];
            }
        }
    }
    // Validation rejects empty queries, so len_q is never 0 and this never stores; the
    // compiler cannot know that, and keeps the prefetching reads.
    if PREFETCH_V && params.len_q == 0u {
        dst[0] = touched;
    }
    if li < ROWS && t0 + li < nrows {
        var l = 0.0;
        for (var g = 0u; g < KEY_GROUPS; g++) {
            l += tile_p[g * ROWS + li];
        }
        let m = m_run[li];
        let nan = bad[li] != 0u;
        let row = row_of(t0 + li, heads_lo, nh);
        if DIRECT {
            if (params.flags & FLAG_WRITE_LSE) != 0u {
                let i = params.row_start + row.lrow;
                lse[row.bh * params.len_q + i - params.lse_base] =
                    finish_lse(m, l, nan, m == neg_inf());
            }
        } else {
            let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
            let pi = prow * split.splits + tile.sidx;
            dst[split.ml_base + 2u * pi] = select(m, quiet_nan(), nan);
            dst[split.ml_base + 2u * pi + 1u] = l;
        }
    }
}
