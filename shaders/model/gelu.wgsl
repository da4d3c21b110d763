// GELU in place, the exact erf form: gelu(x) = x/2 (1 + erf(x/√2)) = x/2 erfc(-x/√2).
// WGSL has no erf. erfc comes from the Chebyshev fit of Numerical Recipes (erfcc,
// fractional error below 1.2e-7 for every argument), and is used as erfc rather than
// 1 - erf so that the far negative tail keeps its relative accuracy too.

// Must match `GeluParams` in src/model/ops/gelu.rs.
struct Gelu {
    len: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Gelu;
@group(0) @binding(1) var<storage, read_write> data: array<f32>;

fn erfc(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * exp(poly);
    return select(2.0 - r, r, x >= 0.0);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid.x;
    // Invocations past the last element (the last workgroup's tail) write nothing.
    if i >= params.len {
        return;
    }
    let v = data[i];
    data[i] = 0.5 * v * erfc(-v * 0.70710678118654752);
}
