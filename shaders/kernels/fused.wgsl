// Fused flash attention for one chunk: scores, online softmax and weights·V in one pass,
// never writing the score matrix (FlashAttention 2's loop order). With PARTIAL it is
// also the first pass of split-KV decoding (flash-decoding).
//
// Rows. A workgroup serves one K/V head and a tile of WG * ROWS rows taken from every
// query head of the chunk that reads that K/V head, position-major: virtual row t is
// position t / nh of head t % nh (nh heads). Grouped-query heads thus share each K and V
// tile they load. Invocation `li` owns rows `li + WG * r`, r < ROWS (register blocking:
// every K or V value read from workgroup memory feeds ROWS rows).
//
// Keys. K and V go through workgroup memory KEYS keys at a time, as vec4s. Each row
// keeps a running maximum `m`, a running sum `l` of exp(logit - m) and an unnormalised
// output; when `m` grows both are rescaled by exp(m_old - m_new). Tiles that causal,
// window or key length hide from every row of the tile are never loaded; tiles they
// allow entirely, without an explicit mask, skip the per-element rule. A workgroup
// covers the keys of one split (`split`); the fused path has one split.
//
// Output. Without PARTIAL the output is divided by `l` once at the end and written with
// lse = m + ln(l). With PARTIAL each row's (unnormalised output, m, l) for this split
// goes to `dst` for combine.wgsl.
//
// Row rule (src/reference.rs): a key is allowed when causal/window/key length and the
// mask allow it and its final logit is not -inf. A NaN logit, or a +inf one, makes the
// whole row NaN (out and lse; a partial records m = NaN); a row with no allowed key gives
// out 0 and lse -inf; a key whose weight is exactly 0 adds nothing, so a NaN in V behind
// a masked key never leaks.

// q, mask, key lengths and split come with tile.wgsl, k and v with kv_scalar.wgsl.
// The output (B, Hq, Lq, Dv) window, or with PARTIAL the partials.
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

// Invocations per workgroup.
override WG: u32 = 64u;
// Rows per invocation; ROWS * HEAD_DIM4 and ROWS * HEAD_DIM_V4 must not exceed REG4,
// ROWS * KEYS must not exceed SREG, ROWS must not exceed ROWS_MAX (the launcher checks).
override ROWS: u32 = 1u;
// Keys per K/V tile.
override KEYS: u32 = 32u;
// Rows of q, k (D columns) and v (Dv columns) are held as vec4s, 4 columns per load
// from workgroup memory: at least ceil(D / 4) and ceil(Dv / 4) of them, rounded up to a
// few sizes so that one pipeline serves several head dims. Columns past D and Dv are
// zeros. Loops over them have constant trip counts.
override HEAD_DIM4: u32 = 16u;
override HEAD_DIM_V4: u32 = 16u;
// Write partials for combine.wgsl instead of the output.
override PARTIAL: bool = false;

const REG4: u32 = 64u;
const SREG: u32 = 128u;
const ROWS_MAX: u32 = 8u;

var<workgroup> k_tile: array<vec4<f32>, KEYS * HEAD_DIM4>;
var<workgroup> v_tile: array<vec4<f32>, KEYS * HEAD_DIM_V4>;
var<workgroup> kv_len_shared: u32;
// Set when the current V tile holds a NaN or an infinity; two, used alternately, so one
// can be cleared while the other is read.
var<workgroup> v_nonfinite: array<atomic<u32>, 2>;

fn all_finite(x: vec4<f32>) -> bool {
    return all((bitcast<vec4<u32>>(x) & vec4(0x7f800000u)) != vec4(0x7f800000u));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tile_rows = WG * ROWS;
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
        atomicStore(&v_nonfinite[0], 0u);
        atomicStore(&v_nonfinite[1], 0u);
    }
    let kv_len = workgroupUniformLoad(&kv_len_shared);
    let keys = key_range(tile, tile_rows, kv_len);
    let kend = keys.kend;
    let lo = keys.lo;
    let hi = keys.hi;
    let full_lo = keys.full_lo;
    let full_hi = keys.full_hi;
    let no_mask = params.mask_kind == MASK_NONE;

    var q_reg: array<vec4<f32>, REG4>;
    var o_acc: array<vec4<f32>, REG4>;
    var s: array<f32, SREG>;
    var m_run: array<f32, ROWS_MAX>;
    var l_run: array<f32, ROWS_MAX>;
    var bad: array<bool, ROWS_MAX>;
    var any_row = false;
    for (var r = 0u; r < ROWS; r++) {
        let t = t0 + li + WG * r;
        let valid = t < nrows;
        any_row = any_row || valid;
        let row = row_of(t, heads_lo, nh);
        let qrow = (row.bh * params.len_q + params.row_start + row.lrow) * params.dim
            - params.q_base;
        for (var d4 = 0u; d4 < HEAD_DIM4; d4++) {
            var x = vec4(0.0);
            for (var c = 0u; c < 4u; c++) {
                let d = 4u * d4 + c;
                // Rows past the tile's rows and the padding past D hold zeros; such rows
                // are never written.
                if valid && d < params.dim {
                    x[c] = f32(q[qrow + d]);
                }
            }
            q_reg[r * HEAD_DIM4 + d4] = x;
        }
        for (var e4 = 0u; e4 < HEAD_DIM_V4; e4++) {
            o_acc[r * HEAD_DIM_V4 + e4] = vec4(0.0);
        }
        m_run[r] = neg_inf();
        l_run[r] = 0.0;
        bad[r] = false;
    }

    var parity = 0u;
    let kbase = kv * params.len_k;
    // hi > lo bounds the loop; j0 starts on a KEYS boundary at or below lo, and never
    // below ks (a multiple of KEYS), so splits do not overlap.
    for (var j0 = u32(max(lo, 0) / i32(KEYS)) * KEYS; i32(j0) < hi; j0 += KEYS) {
        // Every invocation is done reading the previous tile.
        workgroupBarrier();
        for (var e4 = li; e4 < KEYS * HEAD_DIM4; e4 += WG) {
            let key = j0 + e4 / HEAD_DIM4;
            var x = vec4(0.0);
            // Keys past this split (and the batch's length, and Lk) load as zeros; such
            // keys are masked. load_k4 zeroes the padding past D.
            if i32(key) < kend {
                x = load_k4(kbase + key, e4 % HEAD_DIM4);
            }
            k_tile[e4] = x;
        }
        var nonfinite = false;
        for (var e4 = li; e4 < KEYS * HEAD_DIM_V4; e4 += WG) {
            let key = j0 + e4 / HEAD_DIM_V4;
            var x = vec4(0.0);
            // As above, for V and Dv.
            if i32(key) < kend {
                x = load_v4(kbase + key, e4 % HEAD_DIM_V4);
            }
            nonfinite = nonfinite || !all_finite(x);
            v_tile[e4] = x;
        }
        if nonfinite {
            atomicOr(&v_nonfinite[parity], 1u);
        }
        workgroupBarrier();
        // Cleared for the tile after next; nobody reads it until then.
        if li == 0u {
            atomicStore(&v_nonfinite[1u - parity], 0u);
        }
        let v_clean = atomicLoad(&v_nonfinite[parity]) == 0u;
        parity = 1u - parity;
        // Invocations without rows only help load tiles (no barrier below).
        if any_row {
            // Scores of ROWS rows x KEYS keys.
            for (var j = 0u; j < KEYS; j++) {
                // Zeroed explicitly: some compilers keep a loop-local var's value from
                // the previous iteration when it has no initializer.
                var acc: array<f32, ROWS_MAX>;
                for (var r = 0u; r < ROWS; r++) {
                    acc[r] = 0.0;
                }
                for (var d4 = 0u; d4 < HEAD_DIM4; d4++) {
                    let kd = k_tile[j * HEAD_DIM4 + d4];
                    for (var r = 0u; r < ROWS; r++) {
                        acc[r] += dot(q_reg[r * HEAD_DIM4 + d4], kd);
                    }
                }
                for (var r = 0u; r < ROWS; r++) {
                    s[r * KEYS + j] = params.scale * acc[r];
                }
            }
            let full_tile = no_mask && i32(j0) >= full_lo && i32(j0 + KEYS) <= full_hi;
            if !full_tile {
                for (var r = 0u; r < ROWS; r++) {
                    let t = t0 + li + WG * r;
                    let row = row_of(t, heads_lo, nh);
                    for (var j = 0u; j < KEYS; j++) {
                        let key = j0 + j;
                        var x = neg_inf();
                        // Only existing rows and keys of this split below the batch's
                        // length reach the rule (and the mask's binding).
                        if t < nrows && i32(key) < kend {
                            let i = params.row_start + row.lrow;
                            x = masked_logit(row.bh, i, key, s[r * KEYS + j]);
                        }
                        s[r * KEYS + j] = x;
                    }
                }
            }

            // Online softmax: new maximum, rescale, probabilities.
            for (var r = 0u; r < ROWS; r++) {
                var tmax = neg_inf();
                for (var j = 0u; j < KEYS; j++) {
                    let x = s[r * KEYS + j];
                    if is_nan(x) || x == -neg_inf() {
                        bad[r] = true;
                    } else {
                        tmax = max(tmax, x);
                    }
                }
                let m_new = max(m_run[r], tmax);
                var alpha = 1.0;
                if m_new != neg_inf() {
                    // exp(-inf) = 0 on the first allowed tile: nothing to rescale yet.
                    alpha = exp(m_run[r] - m_new);
                }
                var psum = 0.0;
                for (var j = 0u; j < KEYS; j++) {
                    // -inf logits (not allowed) give exactly 0; with m_new = -inf every
                    // logit here is -inf.
                    var p = 0.0;
                    if m_new != neg_inf() {
                        p = exp(s[r * KEYS + j] - m_new);
                    }
                    s[r * KEYS + j] = p;
                    psum += p;
                }
                l_run[r] = l_run[r] * alpha + psum;
                m_run[r] = m_new;
                for (var e4 = 0u; e4 < HEAD_DIM_V4; e4++) {
                    o_acc[r * HEAD_DIM_V4 + e4] *= alpha;
                }
            }

            // Out += P · V.
            if v_clean {
                for (var j = 0u; j < KEYS; j++) {
                    for (var e4 = 0u; e4 < HEAD_DIM_V4; e4++) {
                        let ve = v_tile[j * HEAD_DIM_V4 + e4];
                        for (var r = 0u; r < ROWS; r++) {
                            let at = r * HEAD_DIM_V4 + e4;
                            o_acc[at] = fma(vec4(s[r * KEYS + j]), ve, o_acc[at]);
                        }
                    }
                }
            } else {
                // A NaN or infinity in V: keys of weight exactly 0 must add nothing.
                for (var j = 0u; j < KEYS; j++) {
                    for (var e4 = 0u; e4 < HEAD_DIM_V4; e4++) {
                        let ve = v_tile[j * HEAD_DIM_V4 + e4];
                        for (var r = 0u; r < ROWS; r++) {
                            let p = s[r * KEYS + j];
                            let at = r * HEAD_DIM_V4 + e4;
                            o_acc[at] = select(o_acc[at] + p * ve, o_acc[at], p == 0.0);
                        }
                    }
                }
            }
        }
    }

    for (var r = 0u; r < ROWS; r++) {
        let t = t0 + li + WG * r;
        // Rows past the tile's rows are not written.
        if t >= nrows {
            continue;
        }
        let row = row_of(t, heads_lo, nh);
        if PARTIAL {
            let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
            let pi = prow * split.splits + tile.sidx;
            for (var e = 0u; e < params.dim_v; e++) {
                dst[pi * params.dim_v + e] = o_acc[r * HEAD_DIM_V4 + e / 4u][e % 4u];
            }
            var m = m_run[r];
            if bad[r] {
                m = quiet_nan();
            }
            dst[split.ml_base + 2u * pi] = m;
            dst[split.ml_base + 2u * pi + 1u] = l_run[r];
            continue;
        }
        let i = params.row_start + row.lrow;
        let empty = m_run[r] == neg_inf();
        let orow = (row.bh * params.len_q + i) * params.dim_v - params.o_base;
        for (var e = 0u; e < params.dim_v; e++) {
            let y = o_acc[r * HEAD_DIM_V4 + e / 4u][e % 4u] / l_run[r];
            dst[orow + e] = finish_out(y, bad[r], empty);
        }
        if (params.flags & FLAG_WRITE_LSE) != 0u {
            let l = finish_lse(m_run[r], l_run[r], bad[r], empty);
            lse[row.bh * params.len_q + i - params.lse_base] = l;
        }
    }
}
