// Shared by fused_tiled.wgsl and fused_lanes.wgsl (after tile.wgsl and a K/V prelude):
// the output bindings, the vec4 helpers and the row epilogue both kernels build on.

// The output (B, Hq, Lq, Dv) window, or with PARTIAL the partials.
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

fn all_finite(x: vec4<f32>) -> bool {
    return all((bitcast<vec4<u32>>(x) & vec4(0x7f800000u)) != vec4(0x7f800000u));
}

fn nan4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4(0x7fffffffu)) > vec4(0x7f800000u);
}

fn hmax(x: vec4<f32>) -> f32 {
    return max(max(x.x, x.y), max(x.z, x.w));
}

fn hsum(x: vec4<f32>) -> f32 {
    return (x.x + x.y) + (x.z + x.w);
}

// Writes columns 4 * c4 .. 4 * c4 + 3 of an output row (those below Dv).
fn store4(base: u32, c4: u32, y: vec4<f32>) {
    let e = 4u * c4;
    if e < params.dim_v {
        dst[base + e] = y.x;
    }
    if e + 1u < params.dim_v {
        dst[base + e + 1u] = y.y;
    }
    if e + 2u < params.dim_v {
        dst[base + e + 2u] = y.z;
    }
    if e + 3u < params.dim_v {
        dst[base + e + 3u] = y.w;
    }
}

fn finish4(y: vec4<f32>, bad: bool, empty: bool) -> vec4<f32> {
    return vec4(
        finish_out(y.x, bad, empty),
        finish_out(y.y, bad, empty),
        finish_out(y.z, bad, empty),
        finish_out(y.w, bad, empty),
    );
}

// Q columns 4 * d4 .. of row t of the workgroup's rows (zeros past the rows and past D).
fn load_q4(t: u32, nrows: u32, heads_lo: u32, nh: u32, d4: u32) -> vec4<f32> {
    var x = vec4(0.0);
    if t < nrows {
        let row = row_of(t, heads_lo, nh);
        let base = (row.bh * params.len_q + params.row_start + row.lrow) * params.dim
            - params.q_base;
        let d = 4u * d4;
        if d < params.dim {
            x.x = f32(q[base + d]);
        }
        if d + 1u < params.dim {
            x.y = f32(q[base + d + 1u]);
        }
        if d + 2u < params.dim {
            x.z = f32(q[base + d + 2u]);
        }
        if d + 3u < params.dim {
            x.w = f32(q[base + d + 3u]);
        }
    }
    return x;
}

// One row's four keys through the masking rule: `s` holds the scaled scores of keys
// key0 + stride c (in natural units where the mask is additive); rows or keys past what exists are not allowed.
fn mask4(live: bool, bh: u32, i: u32, key0: u32, stride: u32, kend: i32, s: vec4<f32>) -> vec4<f32> {
    var x = vec4(neg_inf());
    if live {
        if i32(key0) < kend {
            x.x = masked_logit(bh, i, key0, s.x);
        }
        if i32(key0 + stride) < kend {
            x.y = masked_logit(bh, i, key0 + stride, s.y);
        }
        if i32(key0 + 2u * stride) < kend {
            x.z = masked_logit(bh, i, key0 + 2u * stride, s.z);
        }
        if i32(key0 + 3u * stride) < kend {
            x.w = masked_logit(bh, i, key0 + 3u * stride, s.w);
        }
    }
    return x;
}

// Writes row `row`'s result for key range `sidx`: with PARTIAL its unnormalised
// output chunks and (m, l); otherwise the output (normalised, through the row rule)
// and lse. Called once per vec4 chunk c4; the scalars only with c4 == 0. The kernel
// declares PARTIAL.
fn store_chunk(row: Row, sidx: u32, c4: u32, m: f32, l: f32, bad: bool, empty: bool, o: vec4<f32>) {
    if PARTIAL {
        let prow = (row.bh - params.bh_start) * params.row_count + row.lrow;
        let pi = prow * split.splits + sidx;
        store4(pi * params.dim_v, c4, o);
        if c4 == 0u {
            dst[split.ml_base + 2u * pi] = select(m, quiet_nan(), bad);
            dst[split.ml_base + 2u * pi + 1u] = l;
        }
        return;
    }
    let i = params.row_start + row.lrow;
    let orow = (row.bh * params.len_q + i) * params.dim_v - params.o_base;
    store4(orow, c4, finish4(o / l, bad, empty));
    if c4 == 0u && (params.flags & FLAG_WRITE_LSE) != 0u {
        var x = quiet_nan();
        if !bad {
            x = select(m + log(l), neg_inf(), empty);
        }
        lse[row.bh * params.len_q + i - params.lse_base] = x;
    }
}
