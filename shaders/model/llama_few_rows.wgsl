// A dense layer y = x W^T for a few rows (a decoding step, a short prompt, the logits of
// the last row), with the head layouts of the crate's linear.wgsl on both sides. The
// tiled linear kernel synchronises its workgroup twice per 16-wide slice of K; on a CPU
// driver those barriers cost more than the arithmetic of a few rows, so here each
// invocation computes one element of y as a dot product over K, with no workgroup
// memory and no barrier. Invocation i computes row i / cols, column i % cols, so the
// invocations of a workgroup share their row of x and read consecutive rows of W.
//
// Row m is (b, l) with b = m / len, l = m % len; column c is (h, d) with h = c / dim,
// d = c % dim; the element lives at ((b * heads + h) * cap + off + l) * dim + d.

// Must match `FewRowsParams` in src/model/llama/gpu/kernels.rs.
struct FewRows {
    rows: u32,
    cols: u32,
    inner: u32,
    _pad0: u32,
    in_len: u32,
    in_heads: u32,
    in_dim: u32,
    in_cap: u32,
    in_off: u32,
    out_len: u32,
    out_heads: u32,
    out_dim: u32,
    out_cap: u32,
    out_off: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: FewRows;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the elements of y.
    if (i >= p.rows * p.cols) {
        return;
    }
    let m = i / p.cols;
    let c = i % p.cols;
    let xb = m / p.in_len;
    let xl = m % p.in_len;
    var acc = 0.0;
    // K is in_heads slices of in_dim (the host checks inner = in_heads * in_dim), each
    // contiguous in x.
    for (var h = 0u; h < p.in_heads; h++) {
        let xs = ((xb * p.in_heads + h) * p.in_cap + p.in_off + xl) * p.in_dim;
        let ws = c * p.inner + h * p.in_dim;
        for (var d = 0u; d < p.in_dim; d++) {
            acc += x[xs + d] * w[ws + d];
        }
    }
    let yb = m / p.out_len;
    let yl = m % p.out_len;
    let yh = c / p.out_dim;
    y[((yb * p.out_heads + yh) * p.out_cap + p.out_off + yl) * p.out_dim + c % p.out_dim] = acc;
}
