// The attention weights of one chunk, recomputed after a fused or decode pass with no
// score matrix beyond the weights themselves, in three stages (the override STAGE) over
// the same bindings:
//   0. each invocation owns one query row and KEYS consecutive keys and writes their
//      masked logits (-inf where a pair is not allowed) into `weights`;
//   1. each invocation reduces SEGMENT logits of one row to (max, sum of exp(x - max))
//      in `partials`;
//   2. each invocation owns SCALE_KEYS keys of one row, folds the row's segments into
//      (M, total) and writes exp(x - M) / total.
// This is the staged softmax's exp(x - max) / sum, so the weights are as exact as its
// own. Subtracting the pass's f32 lse instead is not: at a logit of 1e30 an ulp of lse
// is 7e22, and exp of that difference overflows. The lse serves only the row rule below.
// No stage loops over more than SEGMENT, D or the row's segment count, so no stage meets
// a driver's cap on loop iterations; none uses barriers.
// Agrees with softmax.wgsl: a pair that is not allowed is 0; a row that met a NaN or
// +inf logit has a NaN lse, so its allowed pairs are NaN; a row with no allowed key is
// -inf throughout and gives 0.

@group(0) @binding(1) var<storage, read> q: array<elem>;
@group(0) @binding(2) var<storage, read> k: array<elem>;
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<storage, read> kv_lens: array<u32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> weights: array<f32>;
// Chunk-local: (head in chunk, row in chunk, segment) -> (max, sum).
@group(0) @binding(7) var<storage, read_write> partials: array<vec2<f32>>;

override STAGE: u32 = 0u;

const WG: u32 = 64u;
const KEYS: u32 = 4u;
const SEGMENT: u32 = 256u;
const SCALE_KEYS: u32 = 16u;

// Writes the masked logit of key j (when it exists) from its unscaled score.
fn write_logit(bh: u32, i: u32, j: u32, score: f32, row: u32) {
    if j >= params.len_k {
        return;
    }
    weights[row + j] = masked_logit(bh, i, j, params.scale * score);
}

fn stage_logit(lbh: u32, lrow: u32, g: u32) {
    let bh = params.bh_start + lbh;
    let i = params.row_start + lrow;
    let kv = kv_head_of(bh);
    let j0 = g * KEYS;
    // Keys past the last read the last one; their logits are not written.
    let last = params.len_k - 1u;
    let keys = min(vec4(j0, j0 + 1u, j0 + 2u, j0 + 3u), vec4(last));
    let kb = (vec4(kv * params.len_k) + keys) * params.dim - vec4(params.k_base);
    let qb = (bh * params.len_q + i) * params.dim - params.q_base;
    var acc = vec4(0.0);
    for (var d = 0u; d < params.dim; d++) {
        let kd = vec4(f32(k[kb.x + d]), f32(k[kb.y + d]), f32(k[kb.z + d]), f32(k[kb.w + d]));
        acc = fma(vec4(f32(q[qb + d])), kd, acc);
    }
    let row = weight_row(bh, i);
    write_logit(bh, i, j0, acc.x, row);
    write_logit(bh, i, j0 + 1u, acc.y, row);
    write_logit(bh, i, j0 + 2u, acc.z, row);
    write_logit(bh, i, j0 + 3u, acc.w, row);
}

// Index of key 0 of row i of head bh in the bound weights window.
fn weight_row(bh: u32, i: u32) -> u32 {
    return (bh * params.len_q + i) * params.len_k - params.w_base;
}

fn segments() -> u32 {
    return (params.len_k + SEGMENT - 1u) / SEGMENT;
}

// Online (max, sum of exp(x - max)) over one segment; (-inf, 0) when nothing is allowed.
// A NaN logit needs no care here: its row's lse is NaN and stage 2 writes NaN.
fn stage_stats(lbh: u32, lrow: u32, seg: u32) {
    let row = weight_row(params.bh_start + lbh, params.row_start + lrow);
    let end = min(seg * SEGMENT + SEGMENT, params.len_k);
    var m = neg_inf();
    var s = 0.0;
    for (var j = seg * SEGMENT; j < end; j++) {
        let x = weights[row + j];
        if is_neg_inf(x) {
            continue;
        }
        if x > m {
            // exp(-inf - x) is 0 for the first allowed key.
            s = s * exp(m - x) + 1.0;
            m = x;
        } else {
            s += exp(x - m);
        }
    }
    partials[(lbh * params.row_count + lrow) * segments() + seg] = vec2(m, s);
}

fn stage_normalise(lbh: u32, lrow: u32, g: u32) {
    let bh = params.bh_start + lbh;
    let i = params.row_start + lrow;
    let base = (lbh * params.row_count + lrow) * segments();
    var big = neg_inf();
    for (var seg = 0u; seg < segments(); seg++) {
        big = max(big, partials[base + seg].x);
    }
    var total = 0.0;
    for (var seg = 0u; seg < segments(); seg++) {
        let part = partials[base + seg];
        if !is_neg_inf(part.x) {
            total += part.y * exp(part.x - big);
        }
    }
    let nan_row = is_nan(lse[bh * params.len_q + i - params.lse_base]);
    let row = weight_row(bh, i);
    let end = min(g * SCALE_KEYS + SCALE_KEYS, params.len_k);
    for (var j = g * SCALE_KEYS; j < end; j++) {
        let x = weights[row + j];
        var w = 0.0;
        if !is_neg_inf(x) {
            w = select(exp(x - big) / total, quiet_nan(), nan_row);
        }
        weights[row + j] = w;
    }
}

// Invocations per row in this stage.
fn per_row() -> u32 {
    switch STAGE {
        case 0u: {
            return (params.len_k + KEYS - 1u) / KEYS;
        }
        case 1u: {
            return segments();
        }
        default: {
            return (params.len_k + SCALE_KEYS - 1u) / SCALE_KEYS;
        }
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let n = per_row();
    let t = linear_workgroup(wid, nwg) * WG + li;
    if t >= n * params.row_count * params.bh_count {
        return;
    }
    let g = t % n;
    let lrow = (t / n) % params.row_count;
    let lbh = t / (n * params.row_count);
    switch STAGE {
        case 0u: {
            stage_logit(lbh, lrow, g);
        }
        case 1u: {
            stage_stats(lbh, lrow, g);
        }
        default: {
            stage_normalise(lbh, lrow, g);
        }
    }
}
