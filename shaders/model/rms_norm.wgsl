// RMSNorm with the residual add before it, one workgroup per row:
//   if add: x[r] += delta[r]          (the residual stream, updated in place)
//   out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight
// The sum of squares is reduced through workgroup memory.

// Must match `RmsNormParams` in src/model/ops/rms_norm.rs.
struct RmsNorm {
    rows: u32,
    width: u32,
    // 1: add delta into x first; 0: normalise x as it is.
    add: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: RmsNorm;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;

var<workgroup> partial: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = wid.x + wid.y * nwg.x;
    // Workgroups past the last row (the 2-D grid's tail) still reach every barrier.
    let live = r < p.rows;
    let base = r * p.width;
    var sq = 0.0;
    if (live) {
        for (var c = lid; c < p.width; c += WG) {
            var v = x[base + c];
            if (p.add == 1u) {
                v += delta[base + c];
                x[base + c] = v;
            }
            sq += v * v;
        }
    }
    partial[lid] = sq;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let inv = inverseSqrt(partial[0] / f32(p.width) + p.eps);
    if (live) {
        for (var c = lid; c < p.width; c += WG) {
            out[base + c] = x[base + c] * inv * weight[c];
        }
    }
}
