// The attention weights of one chunk from the row log-sum-exp that the fused or decode
// pass wrote, with no score matrix beyond the weights themselves, in three stages (the
// override STAGE) over the same bindings:
//   0. each invocation owns one query row and KEYS consecutive keys and writes
//      e = exp(masked logit - lse);
//   1. each invocation sums SEGMENT keys of one row into `partials`;
//   2. each invocation owns SCALE_KEYS keys of one row and divides them by the row's sum.
// The division makes the weights as exact as the staged softmax's exp(x - max) / sum:
// lse is rounded to f32, and at a large logit (lse near 1e4, say) that rounding scales a
// whole row's e by up to half an ulp of lse; the sum carries the same factor, which
// cancels. No stage loops over more than SEGMENT, D or the row's segment count, so no
// stage meets a driver's cap on loop iterations; none uses barriers.
// Agrees with softmax.wgsl: a pair that is not allowed is 0; a row that met a NaN has a
// NaN lse, so its allowed pairs are NaN; a row with no allowed key has lse -inf and is
// 0 throughout (a 0 stays 0 when divided).

@group(0) @binding(1) var<storage, read> q: array<elem>;
@group(0) @binding(2) var<storage, read> k: array<elem>;
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<storage, read> kv_lens: array<u32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> weights: array<f32>;
// Chunk-local: (head in chunk, row in chunk, segment).
@group(0) @binding(7) var<storage, read_write> partials: array<f32>;

override STAGE: u32 = 0u;

const WG: u32 = 64u;
const KEYS: u32 = 4u;
const SEGMENT: u32 = 256u;
const SCALE_KEYS: u32 = 16u;

// Writes e for key j (when it exists) from its unscaled score.
fn write_exp(bh: u32, i: u32, j: u32, score: f32, row_lse: f32, row: u32) {
    if j >= params.len_k {
        return;
    }
    let x = masked_logit(bh, i, j, params.scale * score);
    weights[row + j] = select(exp(x - row_lse), 0.0, is_neg_inf(x));
}

fn stage_exp(lbh: u32, lrow: u32, g: u32) {
    let bh = params.bh_start + lbh;
    let i = params.row_start + lrow;
    let kv = kv_head_of(bh);
    let j0 = g * KEYS;
    // Keys past the last read the last one; their weights are not written.
    let last = params.len_k - 1u;
    let keys = min(vec4(j0, j0 + 1u, j0 + 2u, j0 + 3u), vec4(last));
    let kb = (vec4(kv * params.len_k) + keys) * params.dim - vec4(params.k_base);
    let qb = (bh * params.len_q + i) * params.dim - params.q_base;
    var acc = vec4(0.0);
    for (var d = 0u; d < params.dim; d++) {
        let kd = vec4(f32(k[kb.x + d]), f32(k[kb.y + d]), f32(k[kb.z + d]), f32(k[kb.w + d]));
        acc = fma(vec4(f32(q[qb + d])), kd, acc);
    }
    let row_lse = lse[bh * params.len_q + i - params.lse_base];
    let row = weight_row(bh, i);
    write_exp(bh, i, j0, acc.x, row_lse, row);
    write_exp(bh, i, j0 + 1u, acc.y, row_lse, row);
    write_exp(bh, i, j0 + 2u, acc.z, row_lse, row);
    write_exp(bh, i, j0 + 3u, acc.w, row_lse, row);
}

// Index of key 0 of row i of head bh in the bound weights window.
fn weight_row(bh: u32, i: u32) -> u32 {
    return (bh * params.len_q + i) * params.len_k - params.w_base;
}

fn segments() -> u32 {
    return (params.len_k + SEGMENT - 1u) / SEGMENT;
}

fn stage_sum(lbh: u32, lrow: u32, seg: u32) {
    let row = weight_row(params.bh_start + lbh, params.row_start + lrow);
    let end = min(seg * SEGMENT + SEGMENT, params.len_k);
    var s = 0.0;
    for (var j = seg * SEGMENT; j < end; j++) {
        s += weights[row + j];
    }
    partials[(lbh * params.row_count + lrow) * segments() + seg] = s;
}

fn stage_scale(lbh: u32, lrow: u32, g: u32) {
    let base = (lbh * params.row_count + lrow) * segments();
    var total = 0.0;
    for (var seg = 0u; seg < segments(); seg++) {
        total += partials[base + seg];
    }
    let row = weight_row(params.bh_start + lbh, params.row_start + lrow);
    let end = min(g * SCALE_KEYS + SCALE_KEYS, params.len_k);
    for (var j = g * SCALE_KEYS; j < end; j++) {
        let e = weights[row + j];
        // A zero on the bits: comparisons cannot be trusted to see NaN on every driver.
        weights[row + j] = select(e / total, 0.0, (bitcast<u32>(e) & 0x7fffffffu) == 0u);
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
            stage_exp(lbh, lrow, g);
        }
        case 1u: {
            stage_sum(lbh, lrow, g);
        }
        default: {
            stage_scale(lbh, lrow, g);
        }
    }
}
