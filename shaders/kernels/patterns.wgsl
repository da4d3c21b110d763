// Attention patterns without the Lq x Lk matrix: every value is recomputed from q and k
// as w = exp(s - m) / l, where s is the masked logit (masking.wgsl) and (m, l) the row's
// largest allowed logit and sum of exp(s - m), which stage 0 computes first. Keeping
// (m, l) apart rather than their f32 log-sum-exp keeps w exact at any logit size (at a
// logit of 1e30 an ulp of the lse is 7e22). Stages (the override STAGE), in order:
//   0. stats: each invocation owns ROWS rows of one head and loops over their keys,
//      online, for (m, l) and, for the entropy, t = sum of exp(s - m) * (s - m):
//      -sum w log w = log(l) - t / l;
//   1. weights: each invocation writes KEYS weights of one row of a selected head;
//   2. pool: each invocation reduces one cell of the pooled map to its max and mean;
//   3. column sums: each invocation sums KEYS columns over the window's rows.
// Rows and columns are those of the window (pattern.row_lo.., pattern.col_lo..); keys a
// row's causal or window structure excludes are skipped, the rest go through the
// masking rule. No loop runs more than BLOCK iterations (drivers cap loop counts): long
// loops are a loop of BLOCK-long loops. Where a driver caps the iterations of one
// invocation in total, the host records a stage several times over slices of its work
// (pattern.slice_*): stats over ranges of keys, pool over sub-blocks of every cell,
// column sums over ranges of rows; each slice adds to what the earlier ones left in
// `stats` or `result`. Row rule as everywhere: a row that met a NaN or +inf logit is NaN
// throughout; a row with no allowed key has weights 0 and entropy 0.

// Must match `PatternParams` in src/gpu/kernels/patterns.rs.
struct Pattern {
    // Selected (batch, head) pairs for weights and pool, listed in `heads`.
    n_sel: u32,
    // Heads with stats: every flattened head (stats_all = 1, slot = bh) or the selected
    // ones (slot = index in `heads`).
    n_stat: u32,
    stats_all: u32,
    // Bit 0 entropy, bit 1 weights, bit 2 pool, bit 3 column sums.
    outputs: u32,
    row_lo: u32,
    row_count: u32,
    col_lo: u32,
    col_count: u32,
    pool_rows: u32,
    pool_cols: u32,
    // Element offsets of each output in `result`.
    off_entropy: u32,
    off_weights: u32,
    off_max: u32,
    off_mean: u32,
    off_colsum: u32,
    // Where a stage marks that the driver cut one of its loops short.
    off_cut: u32,
    // This recording's slice of the stage's work: stats, keys [slice_lo, slice_hi);
    // column sums, window rows [slice_lo, slice_hi); pool, the rows [slice_lo, slice_hi)
    // and columns [slice_lo2, slice_hi2) of every cell, counted from the cell's first.
    slice_lo: u32,
    slice_hi: u32,
    slice_lo2: u32,
    slice_hi2: u32,
    // Bit 0: the first slice (start from nothing); bit 1: the last (finish the mean).
    slice_flags: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(1) var<uniform> pattern: Pattern;
@group(0) @binding(2) var<storage, read> q: array<elem>;
@group(0) @binding(3) var<storage, read> k: array<elem>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;
@group(0) @binding(5) var<storage, read> kv_lens: array<u32>;
@group(0) @binding(6) var<storage, read> heads: array<u32>;
// Per row: (m, l, t, 0); m is NaN once the row met a poisoning logit.
@group(0) @binding(7) var<storage, read_write> stats: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> result: array<f32>;

override STAGE: u32 = 0u;

// Set when a loop ended before its bound: some drivers stop every loop of an invocation
// once a shared count of iterations runs out (llvmpipe before Mesa 25: 65,535), which
// would silently drop keys. Each stage reports it, and the call fails instead.
var<private> CUT: bool = false;

fn check_end(at: u32, end: u32) {
    if at < end {
        CUT = true;
    }
}

const WG: u32 = 64u;
const ROWS: u32 = 4u;
const KEYS: u32 = 4u;
const BLOCK: u32 = 4096u;
const OUT_ENTROPY: u32 = 1u;
const OUT_WEIGHTS: u32 = 2u;
const OUT_POOL: u32 = 4u;
const OUT_COLSUM: u32 = 8u;
const FIRST_SLICE: u32 = 1u;
const LAST_SLICE: u32 = 2u;

fn first_slice() -> bool {
    return (pattern.slice_flags & FIRST_SLICE) != 0u;
}

fn is_pos_inf(x: f32) -> bool {
    return bitcast<u32>(x) == 0x7f800000u;
}

// A logit that makes its row NaN.
fn poisons(x: f32) -> bool {
    return is_nan(x) || is_pos_inf(x);
}

// The unscaled score of query row i of head bh with key j.
fn score(bh: u32, i: u32, j: u32) -> f32 {
    let qb = (bh * params.len_q + i) * params.dim - params.q_base;
    let kb = (kv_head_of(bh) * params.len_k + j) * params.dim - params.k_base;
    var acc = 0.0;
    // Four terms per iteration (fewer iterations against a driver's cap), in order.
    let d4 = params.dim & ~3u;
    var d = 0u;
    for (; d < d4; d += 4u) {
        acc = fma(f32(q[qb + d]), f32(k[kb + d]), acc);
        acc = fma(f32(q[qb + d + 1u]), f32(k[kb + d + 1u]), acc);
        acc = fma(f32(q[qb + d + 2u]), f32(k[kb + d + 2u]), acc);
        acc = fma(f32(q[qb + d + 3u]), f32(k[kb + d + 3u]), acc);
    }
    check_end(d, d4);
    for (; d < params.dim; d++) {
        acc = fma(f32(q[qb + d]), f32(k[kb + d]), acc);
    }
    check_end(d, params.dim);
    return acc;
}

// Element d of the four query rows starting at `qb`.
fn q_at(qb: vec4<u32>, d: u32) -> vec4<f32> {
    return vec4(f32(q[qb.x + d]), f32(q[qb.y + d]), f32(q[qb.z + d]), f32(q[qb.w + d]));
}

// The unscaled scores of rows i0 .. i0 + 3 (the last clamped to `last`) with key j, each
// summed in the same order as `score`, so that both give the same bits.
fn score4(bh: u32, i0: u32, last: u32, j: u32) -> vec4<f32> {
    let rows = min(vec4(i0, i0 + 1u, i0 + 2u, i0 + 3u), vec4(last));
    let qb = (vec4(bh * params.len_q) + rows) * params.dim - vec4(params.q_base);
    let kb = (kv_head_of(bh) * params.len_k + j) * params.dim - params.k_base;
    var acc = vec4(0.0);
    let d4 = params.dim & ~3u;
    var d = 0u;
    for (; d < d4; d += 4u) {
        acc = fma(q_at(qb, d), vec4(f32(k[kb + d])), acc);
        acc = fma(q_at(qb, d + 1u), vec4(f32(k[kb + d + 1u])), acc);
        acc = fma(q_at(qb, d + 2u), vec4(f32(k[kb + d + 2u])), acc);
        acc = fma(q_at(qb, d + 3u), vec4(f32(k[kb + d + 3u])), acc);
    }
    check_end(d, d4);
    for (; d < params.dim; d++) {
        acc = fma(q_at(qb, d), vec4(f32(k[kb + d])), acc);
    }
    check_end(d, params.dim);
    return acc;
}

fn logit(bh: u32, i: u32, j: u32) -> f32 {
    return masked_logit(bh, i, j, params.scale * score(bh, i, j));
}

// Keys [lo, hi) the causal and window structure may allow for row i, within [a, b).
fn key_span(i: u32, a: u32, b: u32) -> vec2<u32> {
    let p = i32(i) + params.pos_offset;
    var lo = max(i32(a), p - params.win_left);
    var hi = min(i32(b), p + params.win_right + 1);
    if (params.flags & FLAG_CAUSAL) != 0u {
        hi = min(hi, p + 1);
    }
    lo = max(lo, 0);
    hi = max(hi, lo);
    return vec2(u32(lo), u32(hi));
}

// Query rows [lo, hi) that may attend some key in [j0, j1] by structure, within [a, b).
fn row_span(j0: u32, j1: u32, a: u32, b: u32) -> vec2<u32> {
    // Key j is reachable from p when p - right <= j <= p + left (and p >= j if causal).
    var lo = i32(j0) - params.win_right - params.pos_offset;
    if (params.flags & FLAG_CAUSAL) != 0u {
        lo = max(lo, i32(j0) - params.pos_offset);
    }
    let hi = i32(j1) + params.win_left - params.pos_offset + 1;
    let l = clamp(lo, i32(a), i32(b));
    let h = clamp(hi, l, i32(b));
    return vec2(u32(l), u32(h));
}

// The stats slot holding head bh's rows (sel: its index among the selected heads).
fn stat_slot(bh: u32, sel: u32) -> u32 {
    return select(sel, bh, pattern.stats_all != 0u);
}

// Weight of key j in row i of head bh whose stats are `ml`: 0 where not allowed.
fn weight(bh: u32, i: u32, j: u32, ml: vec2<f32>) -> f32 {
    let x = logit(bh, i, j);
    if is_neg_inf(x) {
        return 0.0;
    }
    return select(exp(x - ml.x) / ml.y, quiet_nan(), is_nan(ml.x));
}

// Row i's running (m, l, t) after one more masked logit x; a NaN m marks a row that met
// a poisoning logit.
fn fold(acc: vec3<f32>, x: f32) -> vec3<f32> {
    if is_nan(acc.x) || is_neg_inf(x) {
        return acc;
    }
    if poisons(x) {
        return vec3(quiet_nan());
    }
    if x > acc.x {
        // Rescale to the new max: t' = c (t + l (m - x)), l' = c l + 1.
        let c = exp(acc.x - x);
        let shift = select(acc.x - x, 0.0, is_neg_inf(acc.x));
        return vec3(x, c * acc.y + 1.0, c * (acc.z + acc.y * shift));
    }
    let e = exp(x - acc.x);
    return vec3(acc.x, acc.y + e, acc.z + e * (x - acc.x));
}

// What an earlier slice left for row `at` of the stats, or the empty row.
fn stats_in(at: u32) -> vec3<f32> {
    if first_slice() {
        return vec3(neg_inf(), 0.0, 0.0);
    }
    return stats[at].xyz;
}

// Stores row `row`'s stats and, for every head, its entropy -sum w log w = log l - t / l.
fn stats_out(slot: u32, bh: u32, row: u32, acc: vec3<f32>) {
    stats[slot * pattern.row_count + row] = vec4(acc, 0.0);
    if (pattern.outputs & OUT_ENTROPY) != 0u && pattern.stats_all != 0u {
        var h = 0.0;
        if is_nan(acc.x) {
            h = quiet_nan();
        } else if !is_neg_inf(acc.x) {
            h = max(log(acc.y) - acc.z / acc.y, 0.0);
        }
        result[pattern.off_entropy + bh * pattern.row_count + row] = h;
    }
}

// Stage 0: (m, l, t) of ROWS consecutive window rows of one head over this slice's keys,
// carried on from the earlier slices'. The four rows are four variables, not an array
// (no private array indexed at run time).
fn stage_stats(t: u32) {
    let groups = (pattern.row_count + ROWS - 1u) / ROWS;
    let slot = t / groups;
    let r0 = (t % groups) * ROWS;
    let bh = select(heads[slot], slot, pattern.stats_all != 0u);
    let last = min(r0 + ROWS, pattern.row_count) - 1u;
    let base = slot * pattern.row_count + r0;
    var a0 = stats_in(base);
    var a1 = stats_in(min(base + 1u, base + last - r0));
    var a2 = stats_in(min(base + 2u, base + last - r0));
    var a3 = stats_in(min(base + 3u, base + last - r0));
    let i0 = pattern.row_lo + r0;
    let a = key_span(i0, 0u, params.len_k);
    let b = key_span(pattern.row_lo + last, 0u, params.len_k);
    let lo = max(min(a.x, b.x), pattern.slice_lo);
    let hi = max(min(max(a.y, b.y), pattern.slice_hi), lo);
    let n = last - r0;
    var blk = lo;
    for (; blk < hi; blk += BLOCK) {
        let end = min(blk + BLOCK, hi);
        var j = blk;
        for (; j < end; j++) {
            let sc = params.scale * score4(bh, i0, pattern.row_lo + last, j);
            a0 = fold(a0, masked_logit(bh, i0, j, sc.x));
            if n >= 1u {
                a1 = fold(a1, masked_logit(bh, i0 + 1u, j, sc.y));
            }
            if n >= 2u {
                a2 = fold(a2, masked_logit(bh, i0 + 2u, j, sc.z));
            }
            if n >= 3u {
                a3 = fold(a3, masked_logit(bh, i0 + 3u, j, sc.w));
            }
        }
        check_end(j, end);
    }
    check_end(blk, hi);
    stats_out(slot, bh, r0, a0);
    if n >= 1u {
        stats_out(slot, bh, r0 + 1u, a1);
    }
    if n >= 2u {
        stats_out(slot, bh, r0 + 2u, a2);
    }
    if n >= 3u {
        stats_out(slot, bh, r0 + 3u, a3);
    }
}

// Stage 1: KEYS weights of one window row of a selected head.
fn stage_weights(t: u32) {
    let groups = (pattern.col_count + KEYS - 1u) / KEYS;
    let g = t % groups;
    let row = (t / groups) % pattern.row_count;
    let sel = t / (groups * pattern.row_count);
    let bh = heads[sel];
    let i = pattern.row_lo + row;
    let ml = stats[stat_slot(bh, sel) * pattern.row_count + row].xy;
    let base = pattern.off_weights + (sel * pattern.row_count + row) * pattern.col_count;
    for (var c = g * KEYS; c < min(g * KEYS + KEYS, pattern.col_count); c++) {
        result[base + c] = weight(bh, i, pattern.col_lo + c, ml);
    }
}

// First window row (or column) of cell n of `cells` over `len`.
fn edge(n: u32, cells: u32, len: u32) -> u32 {
    return n * len / cells;
}

// Stage 2: the max and sum of this slice's sub-block of one pooled cell of a selected
// head, added to the earlier slices'; the last slice turns the sum into the mean.
fn stage_pool(t: u32) {
    let c = t % pattern.pool_cols;
    let r = (t / pattern.pool_cols) % pattern.pool_rows;
    let sel = t / (pattern.pool_cols * pattern.pool_rows);
    let bh = heads[sel];
    let slot = stat_slot(bh, sel);
    let r_lo = edge(r, pattern.pool_rows, pattern.row_count);
    let r_hi = edge(r + 1u, pattern.pool_rows, pattern.row_count);
    let c_lo = pattern.col_lo + edge(c, pattern.pool_cols, pattern.col_count);
    let c_hi = pattern.col_lo + edge(c + 1u, pattern.pool_cols, pattern.col_count);
    let row_end = min(r_lo + pattern.slice_hi, r_hi);
    let col_lo = min(c_lo + pattern.slice_lo2, c_hi);
    let col_hi = min(c_lo + pattern.slice_hi2, c_hi);
    let cell = (sel * pattern.pool_rows + r) * pattern.pool_cols + c;
    var big = 0.0;
    var total = 0.0;
    if !first_slice() {
        big = result[pattern.off_max + cell];
        total = result[pattern.off_mean + cell];
    }
    var bad = is_nan(big) || is_nan(total);
    var row = r_lo + pattern.slice_lo;
    for (; row < row_end; row++) {
        let i = pattern.row_lo + row;
        let ml = stats[slot * pattern.row_count + row].xy;
        let span = key_span(i, col_lo, col_hi);
        // Each row summed on its own, then added: shorter f32 sums.
        var part = 0.0;
        var j = span.x;
        for (; j < span.y; j++) {
            let w = weight(bh, i, j, ml);
            bad = bad || is_nan(w);
            big = max(big, w);
            part += w;
        }
        check_end(j, span.y);
        total += part;
    }
    check_end(row, row_end);
    if (pattern.slice_flags & LAST_SLICE) != 0u {
        total /= f32(r_hi - r_lo) * f32(c_hi - c_lo);
    }
    result[pattern.off_max + cell] = select(big, quiet_nan(), bad);
    result[pattern.off_mean + cell] = select(total, quiet_nan(), bad);
}

// Stage 3: KEYS column sums of one head over this slice's window rows, added to the
// earlier slices'.
fn stage_colsum(t: u32) {
    let groups = (pattern.col_count + KEYS - 1u) / KEYS;
    let g = t % groups;
    let bh = t / groups;
    let c0 = g * KEYS;
    let c1 = min(c0 + KEYS, pattern.col_count);
    let lo = pattern.row_lo;
    let span = row_span(pattern.col_lo + c0, pattern.col_lo + c1 - 1u, lo, lo + pattern.row_count);
    let first = max(span.x, lo + pattern.slice_lo);
    let stop = max(min(span.y, lo + pattern.slice_hi), first);
    var sums = vec4(0.0);
    if !first_slice() {
        for (var c = c0; c < c1; c++) {
            sums[c - c0] = result[pattern.off_colsum + bh * pattern.col_count + c];
        }
    }
    var blk = first;
    for (; blk < stop; blk += BLOCK) {
        var part = vec4(0.0);
        let end = min(blk + BLOCK, stop);
        var i = blk;
        for (; i < end; i++) {
            let ml = stats[bh * pattern.row_count + i - lo].xy;
            for (var c = c0; c < c1; c++) {
                part[c - c0] += weight(bh, i, pattern.col_lo + c, ml);
            }
        }
        check_end(i, end);
        sums += part;
    }
    check_end(blk, stop);
    for (var c = c0; c < c1; c++) {
        result[pattern.off_colsum + bh * pattern.col_count + c] = sums[c - c0];
    }
}

// Invocations of this stage.
fn invocations() -> u32 {
    switch STAGE {
        case 0u: {
            return pattern.n_stat * ((pattern.row_count + ROWS - 1u) / ROWS);
        }
        case 1u: {
            return pattern.n_sel * pattern.row_count * ((pattern.col_count + KEYS - 1u) / KEYS);
        }
        case 2u: {
            return pattern.n_sel * pattern.pool_rows * pattern.pool_cols;
        }
        default: {
            return pattern.n_stat * ((pattern.col_count + KEYS - 1u) / KEYS);
        }
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let t = linear_workgroup(wid, nwg) * WG + li;
    if t >= invocations() {
        return;
    }
    switch STAGE {
        case 0u: {
            stage_stats(t);
        }
        case 1u: {
            stage_weights(t);
        }
        case 2u: {
            stage_pool(t);
        }
        default: {
            stage_colsum(t);
        }
    }
    if CUT {
        result[pattern.off_cut] = 1.0;
    }
}
