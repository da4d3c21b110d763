// One row times a matrix: y = x W^T for a single token (a decoding step, the logits of
// the last row). The crate's tiled linear kernel computes 16 rows per workgroup, so on
// one row it does sixteen times the work; here each invocation computes one output
// column as a dot product over the shared width K, reading its row of W front to back.
//
// x is one row starting at element x_off. Column c of y (c = h * dim + d) goes to
// (h * cap + off) * dim + d, so a step's key or value lands at its position in a KV
// store of (heads, cap, dim); a plain row is dim = cols, cap = 1, off = 0.

// Must match `MatvecParams` in src/model/llama/gpu/kernels.rs.
struct Matvec {
    cols: u32,
    inner: u32,
    x_off: u32,
    y_dim: u32,
    y_cap: u32,
    y_off: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Matvec;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let c = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the columns there are.
    if (c >= p.cols) {
        return;
    }
    let row = c * p.inner;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    let body = p.inner - p.inner % 4u;
    for (var k = 0u; k < body; k += 4u) {
        a0 += x[p.x_off + k] * w[row + k];
        a1 += x[p.x_off + k + 1u] * w[row + k + 1u];
        a2 += x[p.x_off + k + 2u] * w[row + k + 2u];
        a3 += x[p.x_off + k + 3u] * w[row + k + 3u];
    }
    // The K % 4 columns past the unrolled body.
    for (var k = body; k < p.inner; k++) {
        a0 += x[p.x_off + k] * w[row + k];
    }
    let h = c / p.y_dim;
    y[(h * p.y_cap + p.y_off) * p.y_dim + c % p.y_dim] = (a0 + a1) + (a2 + a3);
}
