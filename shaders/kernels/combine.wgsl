// Split-KV decoding, second pass: merges each row's partials (unnormalised out, max m,
// sum l) from decode.wgsl into the output and log-sum-exp.
//
// With M the largest m: out = sum_s exp(m_s - M) * out_s / sum_s exp(m_s - M) * l_s and
// lse = M + ln(sum). A partial with m = NaN makes the row NaN; a row whose every m is
// -inf had no allowed key (out 0, lse -inf); a split whose factor is exactly 0 adds
// nothing.

@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<uniform> split: Split;

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let prow = linear_workgroup(wid, nwg);
    // Past the chunk's last row in a flattened grid; uniform across the workgroup.
    if prow >= params.bh_count * params.row_count {
        return;
    }
    let bh = params.bh_start + prow / params.row_count;
    let i = params.row_start + prow % params.row_count;
    let first = prow * split.splits;

    var big = neg_inf();
    var bad = false;
    for (var s = 0u; s < split.splits; s++) {
        let m = partials[split.ml_base + 2u * (first + s)];
        if is_nan(m) {
            bad = true;
        } else {
            big = max(big, m);
        }
    }
    let empty = big == neg_inf();
    var total = 0.0;
    for (var s = 0u; s < split.splits; s++) {
        let m = partials[split.ml_base + 2u * (first + s)];
        // Splits without an allowed key hold l = 0; skip exp(-inf - -inf).
        if m != neg_inf() && !empty {
            total += exp(m - big) * partials[split.ml_base + 2u * (first + s) + 1u];
        }
    }
    let orow = (bh * params.len_q + i) * params.dim_v - params.o_base;
    for (var e = li; e < params.dim_v; e += WG) {
        var acc = 0.0;
        for (var s = 0u; s < split.splits; s++) {
            let m = partials[split.ml_base + 2u * (first + s)];
            var f = 0.0;
            if m != neg_inf() && !empty {
                f = exp(m - big);
            }
            // A split of factor exactly 0 adds nothing, NaN included.
            if f != 0.0 {
                acc += f * partials[(first + s) * params.dim_v + e];
            }
        }
        out[orow + e] = finish_out(acc / total, bad, empty);
    }
    if li == 0u && (params.flags & FLAG_WRITE_LSE) != 0u {
        lse[bh * params.len_q + i - params.lse_base] = finish_lse(big, total, bad, empty);
    }
}
