// Fused scale-applied mask + numerically stable softmax, one workgroup per score row.
// Pass 1 writes the final logits (-inf where not allowed) and finds the NaN-propagating
// row maximum; pass 2 sums exp(x - max); pass 3 writes the weights and log-sum-exp.

@group(0) @binding(1) var<storage, read_write> scores: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<storage, read> kv_lens: array<u32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;

const WG: u32 = 128u;

var<workgroup> red: array<f32, WG>;
var<workgroup> red_nan: array<u32, WG>;

// Tree reduction of `red` (max or sum) and `red_nan` (or); the result lands in slot 0.
fn reduce(li: u32, is_max: bool) {
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        workgroupBarrier();
        if li < stride {
            let a = red[li];
            let b = red[li + stride];
            red[li] = select(a + b, max(a, b), is_max);
            red_nan[li] = red_nan[li] | red_nan[li + stride];
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let linear = linear_workgroup(wid, nwg);
    // Past the last row of a flattened grid; uniform across the workgroup.
    if linear >= params.bh_count * params.row_count {
        return;
    }
    let lbh = linear / params.row_count;
    let lrow = linear % params.row_count;
    let bh = params.bh_start + lbh;
    let i = params.row_start + lrow;
    let base = linear * params.len_k;

    var m = neg_inf();
    var nan = 0u;
    for (var j = li; j < params.len_k; j += WG) {
        let x = masked_logit(bh, i, j, scores[base + j]);
        scores[base + j] = x;
        if is_nan(x) {
            nan = 1u;
        } else {
            m = max(m, x);
        }
    }
    red[li] = m;
    red_nan[li] = nan;
    reduce(li, true);
    let row_max = red[0];
    // A NaN logit, or a +inf one (exp(inf - inf)), makes the whole row NaN.
    let row_nan = red_nan[0] != 0u || row_max == -neg_inf();
    let empty = !row_nan && row_max == neg_inf();
    workgroupBarrier();

    var s = 0.0;
    for (var j = li; j < params.len_k; j += WG) {
        let x = scores[base + j];
        if !is_neg_inf(x) && !is_nan(x) {
            s += exp(x - row_max);
        }
    }
    red[li] = s;
    red_nan[li] = 0u;
    reduce(li, false);
    let total = red[0];

    for (var j = li; j < params.len_k; j += WG) {
        let x = scores[base + j];
        var w = 0.0;
        if !is_neg_inf(x) {
            w = select(exp(x - row_max) / total, quiet_nan(), row_nan);
        }
        scores[base + j] = w;
    }
    if li == 0u && (params.flags & FLAG_WRITE_LSE) != 0u {
        let l = finish_lse(row_max, total, row_nan, empty);
        lse[bh * params.len_q + i - params.lse_base] = l;
    }
}
