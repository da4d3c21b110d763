// Split-KV decoding, first pass, for adapters with subgroups (the `D_split` scheme of
// llama.cpp's Vulkan flash attention). It computes what decode.wgsl computes: for each row
// of the workgroup, the partial (unnormalised output, max m, sum l) of one key range, which
// combine.wgsl merges.
//
// Lanes are cut into groups of DSPLIT neighbouring lanes of one subgroup, and a group
// shares one key: lane `dl` of the group holds vec4 columns dl, dl + DSPLIT, ... of every
// q row, reads the same columns of the key's K row (so a subgroup's lanes read whole rows
// of consecutive keys, side by side) and its partial dot products are summed across the
// group with subgroupShuffleXor. Every lane of a group then holds the same logits, bit for
// bit (the butterfly adds the same two numbers on both sides), and runs the same online
// softmax (running max m, sum l) for its group's keys, with the output columns of its own
// slice of V.
//
// The key loop has no workgroup barrier: every subgroup walks its own keys (the groups of
// the workgroup take consecutive keys, and stride by the number of groups). At the end,
// the groups of a subgroup merge through subgroupShuffleXor, then the subgroups through
// workgroup memory, once.
//
// Subgroup sizes are read from the `subgroup_size` builtin, never assumed: a subgroup of
// size S holds S / DSPLIT groups, and the workgroup counts its groups and subgroups as
// they arrive. The host picks DSPLIT at most the adapter's smallest subgroup size and WG a
// multiple of its largest (so subgroups are full); should a driver break either promise,
// or hold more subgroups than SUBGROUPS_MAX, the kernel notices and writes NaN partials
// rather than a wrong number.
//
// Row rule (src/reference.rs), as in decode.wgsl: a NaN or +inf logit makes the row's
// partial m NaN; a range with no allowed key leaves m = -inf, l = 0; a key whose weight is
// exactly 0 adds nothing, so a NaN in V behind a masked key never leaks.

// q, mask, key lengths and split come with tile.wgsl, k and v with kv_scalar.wgsl or
// kv_vec4.wgsl; binding 7 is unused.
@group(0) @binding(6) var<storage, read_write> partials: array<f32>;

// Invocations per workgroup: a multiple of every subgroup size of the adapter.
override WG: u32 = 64u;
// Rows per workgroup, at most ROWS_MAX.
override ROWS: u32 = 4u;
// Lanes that share one key: a power of two dividing the subgroup size.
override DSPLIT: u32 = 4u;
// vec4s per row of q and k (D columns) and of v (Dv columns), padded as in fused.wgsl.
override HEAD_DIM4: u32 = 16u;
override HEAD_DIM_V4: u32 = 16u;
// Subgroups a workgroup may hold: WG over the adapter's smallest subgroup size.
override SUBGROUPS_MAX: u32 = 16u;
// vec4 columns per lane of each q row and of each output row: ROWS times either is at
// most REG4_MAX (the launcher checks).
override SLICE4: u32 = (HEAD_DIM4 + DSPLIT - 1u) / DSPLIT;
override SLICE_V4: u32 = (HEAD_DIM_V4 + DSPLIT - 1u) / DSPLIT;

const ROWS_MAX: u32 = 16u;
const REG4_MAX: u32 = 32u;

var<workgroup> kv_len_shared: u32;
// Groups and subgroups counted as they arrive, and whether a promise above was broken.
var<workgroup> group_count: atomic<u32>;
var<workgroup> subgroup_count: atomic<u32>;
var<workgroup> broken: atomic<u32>;
// The three, read back once all have arrived.
var<workgroup> counts: vec3<u32>;
// Each subgroup's running max and sum per row (subgroup s, row r at s * ROWS + r), and
// its NaN rows as bits.
var<workgroup> sub_m: array<f32, SUBGROUPS_MAX * ROWS>;
var<workgroup> sub_l: array<f32, SUBGROUPS_MAX * ROWS>;
var<workgroup> sub_bad: array<u32, SUBGROUPS_MAX>;
// The rows' outputs, summed over subgroups.
var<workgroup> o_sum: array<vec4<f32>, ROWS * HEAD_DIM_V4>;

// A register index, kept inside the private arrays (the launcher's check makes this a
// no-op; trusted kernels still guard every index).
fn reg(x: u32) -> u32 {
    return min(x, REG4_MAX - 1u);
}

// a * fa + b * fb, where a factor of exactly 0 drops its term (NaN included).
fn merge4(a: vec4<f32>, fa: f32, b: vec4<f32>, fb: f32) -> vec4<f32> {
    return select(vec4(0.0), a * fa, fa != 0.0) + select(vec4(0.0), b * fb, fb != 0.0);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let tile = tile_of(linear_workgroup(wid, nwg), ROWS);
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
        atomicStore(&group_count, 0u);
        atomicStore(&subgroup_count, 0u);
        atomicStore(&broken, 0u);
    }
    workgroupBarrier();
    // This subgroup's groups are first .. first + sg_size / DSPLIT of the workgroup's, and
    // `slot` its index among the subgroups.
    let groups_here = sg_size / DSPLIT;
    var first = 0u;
    var slot = 0u;
    // The subgroup's first active lane counts for it (and broadcasts below).
    if lane == subgroupBroadcastFirst(lane) {
        first = atomicAdd(&group_count, groups_here);
        slot = atomicAdd(&subgroup_count, 1u);
    }
    first = subgroupBroadcastFirst(first);
    slot = subgroupBroadcastFirst(slot);
    // A partial subgroup, a group width that does not divide the subgroup, or more
    // subgroups than the workgroup memory holds: the promises the host made.
    let whole = subgroupAdd(1u) == sg_size;
    if !whole || sg_size % DSPLIT != 0u || groups_here == 0u || slot >= SUBGROUPS_MAX {
        atomicStore(&broken, 1u);
    }
    workgroupBarrier();
    if li == 0u {
        counts = vec3(atomicLoad(&group_count), atomicLoad(&subgroup_count), atomicLoad(&broken));
    }
    let c = workgroupUniformLoad(&counts);
    let ngroups = c.x;
    let nsub = min(c.y, SUBGROUPS_MAX);
    let is_broken = c.z != 0u;
    let kv_len = kv_len_shared;
    let keys = key_range(tile, ROWS, kv_len);
    let no_mask = params.mask_kind == MASK_NONE;
    // This lane's group among the subgroup's, and its slice of the columns.
    let g = lane / DSPLIT;
    let dl = lane % DSPLIT;

    // This lane's slice of the q rows.
    var q_reg: array<vec4<f32>, REG4_MAX>;
    for (var r = 0u; r < ROWS; r++) {
        let t = t0 + r;
        for (var i = 0u; i < SLICE4; i++) {
            let c4 = dl + i * DSPLIT;
            var val = vec4(0.0);
            // Rows past the workgroup's rows and columns past D hold zeros; such rows are
            // never written.
            if t < nrows {
                let row = row_of(t, heads_lo, nh);
                let qrow = (row.bh * params.len_q + params.row_start + row.lrow) * params.dim
                    - params.q_base;
                for (var e = 0u; e < 4u; e++) {
                    let d = 4u * c4 + e;
                    if d < params.dim {
                        val[e] = f32(q[qrow + d]);
                    }
                }
            }
            q_reg[reg(r * SLICE4 + i)] = val;
        }
    }

    // The group's online softmax: per row, the running max and sum (alike in every lane of
    // the group) and this lane's output columns.
    var m: array<f32, ROWS_MAX>;
    var l: array<f32, ROWS_MAX>;
    var bad = 0u;
    var o: array<vec4<f32>, REG4_MAX>;
    for (var r = 0u; r < ROWS; r++) {
        m[r] = neg_inf();
        l[r] = 0.0;
        for (var i = 0u; i < SLICE_V4; i++) {
            o[reg(r * SLICE_V4 + i)] = vec4(0.0);
        }
    }

    let kbase = kv * params.len_k;
    // A broken launch (see above) runs no keys: ngroups may be 0 there.
    var lo = keys.hi;
    if !is_broken {
        lo = keys.lo;
    }
    // The subgroup's groups take keys j0 .. j0 + groups_here; the bounds are the same in
    // every lane of a subgroup, so each shuffle finds all its lanes active.
    for (var j0 = u32(lo) + first; i32(j0) < keys.hi; j0 += ngroups) {
        let key = j0 + g;
        // Keys past the range (the subgroup's last step) take part in the shuffles only.
        let live = i32(key) < keys.hi;
        // Zeroed explicitly: some compilers keep a loop-local var's value from the
        // previous iteration when it has no initializer.
        var acc: array<f32, ROWS_MAX>;
        for (var r = 0u; r < ROWS; r++) {
            acc[r] = 0.0;
        }
        if live {
            for (var i = 0u; i < SLICE4; i++) {
                let kd = load_k4(kbase + key, dl + i * DSPLIT);
                for (var r = 0u; r < ROWS; r++) {
                    acc[r] += dot(q_reg[reg(r * SLICE4 + i)], kd);
                }
            }
        }
        // The group's partial dot products summed: lane ^ off stays inside the group.
        for (var off = 1u; off < DSPLIT; off <<= 1u) {
            for (var r = 0u; r < ROWS; r++) {
                acc[r] += subgroupShuffleXor(acc[r], off);
            }
        }
        let full = no_mask && i32(key) >= keys.full_lo && i32(key) < keys.full_hi;
        var p: array<f32, ROWS_MAX>;
        for (var r = 0u; r < ROWS; r++) {
            let t = t0 + r;
            var x = neg_inf();
            // Only existing rows and live keys reach the rule (and the mask's binding).
            if live && t < nrows {
                x = params.scale * acc[r];
                if !full {
                    let row = row_of(t, heads_lo, nh);
                    x = masked_logit(row.bh, params.row_start + row.lrow, key, x);
                }
            }
            // A NaN or +inf logit makes the row NaN; its other keys go on as if it were
            // masked.
            if is_nan(x) || x == -neg_inf() {
                bad |= 1u << r;
                x = neg_inf();
            }
            if x > m[r] {
                // exp(-inf) = 0 on the first allowed key: nothing to rescale yet.
                let a = exp(m[r] - x);
                l[r] *= a;
                for (var i = 0u; i < SLICE_V4; i++) {
                    o[reg(r * SLICE_V4 + i)] *= a;
                }
                m[r] = x;
            }
            // Not allowed: exactly 0 (x > -inf implies m > -inf).
            p[r] = 0.0;
            if x != neg_inf() {
                p[r] = exp(x - m[r]);
            }
            l[r] += p[r];
        }
        if live {
            for (var i = 0u; i < SLICE_V4; i++) {
                let vd = load_v4(kbase + key, dl + i * DSPLIT);
                for (var r = 0u; r < ROWS; r++) {
                    let x = reg(r * SLICE_V4 + i);
                    o[x] = select(fma(vec4(p[r]), vd, o[x]), o[x], p[r] == 0.0);
                }
            }
        }
    }

    // The subgroup's groups merged: lanes that hold the same columns of different groups
    // exchange their state, doubling the span each step, until every group holds the sum.
    for (var off = DSPLIT; off < sg_size; off <<= 1u) {
        bad |= subgroupShuffleXor(bad, off);
        for (var r = 0u; r < ROWS; r++) {
            let m_other = subgroupShuffleXor(m[r], off);
            let l_other = subgroupShuffleXor(l[r], off);
            let big = max(m[r], m_other);
            var fa = 0.0;
            var fb = 0.0;
            // Both without an allowed key: nothing to add (and no exp(-inf - -inf)).
            if big != neg_inf() {
                fa = exp(m[r] - big);
                fb = exp(m_other - big);
            }
            l[r] = select(0.0, l[r] * fa, fa != 0.0) + select(0.0, l_other * fb, fb != 0.0);
            for (var i = 0u; i < SLICE_V4; i++) {
                let x = reg(r * SLICE_V4 + i);
                o[x] = merge4(o[x], fa, subgroupShuffleXor(o[x], off), fb);
            }
            m[r] = big;
        }
    }

    // The subgroups merged through workgroup memory: their maxima and sums first ...
    // Slots past SUBGROUPS_MAX marked the launch broken above.
    if lane == 0u && slot < SUBGROUPS_MAX {
        for (var r = 0u; r < ROWS; r++) {
            sub_m[slot * ROWS + r] = m[r];
            sub_l[slot * ROWS + r] = l[r];
        }
        sub_bad[slot] = bad;
    }
    workgroupBarrier();
    var f: array<f32, ROWS_MAX>;
    for (var r = 0u; r < ROWS; r++) {
        var big = neg_inf();
        for (var s = 0u; s < nsub; s++) {
            big = max(big, sub_m[s * ROWS + r]);
        }
        f[r] = 0.0;
        if big != neg_inf() {
            f[r] = exp(m[r] - big);
        }
    }
    // ... then their outputs, one subgroup at a time (a subgroup of a group writes each
    // column once: lanes dl cover columns dl, dl + DSPLIT, ...).
    for (var s = 0u; s < nsub; s++) {
        if slot == s && g == 0u {
            for (var r = 0u; r < ROWS; r++) {
                for (var i = 0u; i < SLICE_V4; i++) {
                    let c4 = dl + i * DSPLIT;
                    // Padding columns of the last slice past the row.
                    if c4 < HEAD_DIM_V4 {
                        let term = select(vec4(0.0), o[reg(r * SLICE_V4 + i)] * f[r], f[r] != 0.0);
                        let x = r * HEAD_DIM_V4 + c4;
                        o_sum[x] = select(o_sum[x] + term, term, s == 0u);
                    }
                }
            }
        }
        workgroupBarrier();
    }

    for (var x = li; x < ROWS * HEAD_DIM_V4; x += WG) {
        let r = x / HEAD_DIM_V4;
        let e4 = x % HEAD_DIM_V4;
        let t = t0 + r;
        // Rows past the workgroup's rows are not written, nor columns past Dv.
        if t >= nrows || 4u * e4 >= params.dim_v {
            continue;
        }
        let sum = o_sum[x];
        let row = row_of(t, heads_lo, nh);
        let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
        let pi = prow * split.splits + tile.sidx;
        for (var e = 0u; e < 4u; e++) {
            let col = 4u * e4 + e;
            if col < params.dim_v {
                partials[pi * params.dim_v + col] = sum[e];
            }
        }
    }
    // Rows past the workgroup's rows are not written.
    if li < ROWS && t0 + li < nrows {
        var big = neg_inf();
        var nan_row = is_broken;
        for (var s = 0u; s < nsub; s++) {
            big = max(big, sub_m[s * ROWS + li]);
            nan_row = nan_row || ((sub_bad[s] >> li) & 1u) != 0u;
        }
        var total = 0.0;
        for (var s = 0u; s < nsub; s++) {
            let ms = sub_m[s * ROWS + li];
            // Subgroups without an allowed key hold l = 0; skip exp(-inf - -inf).
            if ms != neg_inf() {
                total += exp(ms - big) * sub_l[s * ROWS + li];
            }
        }
        var m_out = big;
        if nan_row {
            m_out = quiet_nan();
        }
        let row = row_of(t0 + li, heads_lo, nh);
        let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
        let pi = prow * split.splits + tile.sidx;
        partials[split.ml_base + 2u * pi] = m_out;
        partials[split.ml_base + 2u * pi + 1u] = total;
    }
}
