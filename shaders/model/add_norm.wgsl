// LayerNorm of each row of x (+ residual): y = (v - mean) / sqrt(var + eps) * gamma + beta,
// v = x + residual (or x alone), mean and variance over the row's columns (two passes, so
// the variance is not the difference of two large sums). One workgroup per row; the
// reductions go through workgroup memory. 32 invocations: a software rasteriser runs a
// workgroup eight lanes at a time and switches between those groups at every barrier,
// and 128 cost lavapipe 7 to 13 % of MiniLM's embeddings against 32 (the
// embed bench, alternating).

// Must match `AddNormParams` in src/model/ops/add_norm.rs.
struct AddNorm {
    rows: u32,
    cols: u32,
    // 1: add the residual before normalising; 0: normalise x alone.
    has_residual: u32,
    _pad0: u32,
    eps: f32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<uniform> params: AddNorm;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> residual: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

const WG: u32 = 32u;

var<workgroup> partial: array<f32, WG>;

fn value(row: u32, c: u32) -> f32 {
    let i = row * params.cols + c;
    if params.has_residual == 1u {
        return x[i] + residual[i];
    }
    return x[i];
}

// The sum of every invocation's `v` (called by the whole workgroup).
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        // Only the lower half adds; lid + s < WG always holds then.
        if lid < s {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let row = wid.x + wid.y * nwg.x;
    // Workgroups past the last row (the 2-D grid's tail) have nothing to do; the test
    // is uniform across the workgroup, so no barrier is skipped by some and not others.
    if row >= params.rows {
        return;
    }
    let lid = lid3.x;
    let n = f32(params.cols);
    var s = 0.0;
    // Columns lid, lid + WG, ... stay below cols by the loop bound.
    for (var c = lid; c < params.cols; c += WG) {
        s += value(row, c);
    }
    let mean = workgroup_sum(lid, s) / n;
    var q = 0.0;
    for (var c = lid; c < params.cols; c += WG) {
        let d = value(row, c) - mean;
        q += d * d;
    }
    let inv = inverseSqrt(workgroup_sum(lid, q) / n + params.eps);
    for (var c = lid; c < params.cols; c += WG) {
        y[row * params.cols + c] = (value(row, c) - mean) * inv * gamma[c] + beta[c];
    }
}
