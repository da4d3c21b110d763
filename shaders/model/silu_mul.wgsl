// SwiGLU's gate: gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
// One invocation per element.

// Must match `SiluMulParams` in src/model/ops/silu_mul.rs.
struct SiluMul {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: SiluMul;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the elements there are.
    if (i >= p.n) {
        return;
    }
    let g = gate[i];
    // For g far below 0, exp(-g) is inf and g / inf is -0: the limit, no NaN.
    gate[i] = g / (1.0 + exp(-g)) * up[i];
}
