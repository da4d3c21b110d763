// A dense layer y = x W^T + b, tiled through workgroup memory: each workgroup computes
// a 16 x 16 block of y, walking the shared width K in 16-wide slices of x and W.
//
// x and y are read and written through a head layout, so that one kernel both splits
// projections into heads (B, H, L, D) and merges heads back into rows (B, L, E):
// row m is (b, l) with b = m / len, l = m % len; column c is (h, d) with h = c / dim,
// d = c % dim; the element lives at ((b * heads + h) * cap + off + l) * dim + d.
// A plain row-major (M, K) matrix is len = cap = M, heads = 1, dim = K, off = 0.
// `off` and `cap` place a step's keys and values at their position in a KV cache.

// Must match `LinearParams` in src/gpu/kernels/linear.rs.
struct Linear {
    // M: rows of x and y.
    rows: u32,
    // N: columns of y, rows of W.
    cols: u32,
    // K: columns of x and W.
    inner: u32,
    // Workgroups along N; workgroup t serves row tile t / tiles_n, column tile t % tiles_n.
    tiles_n: u32,
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
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> lin: Linear;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const T: u32 = 16u;

// Tiles of x (row, k) and W (output column, k).
var<workgroup> xs: array<array<f32, 16>, 16>;
var<workgroup> ws: array<array<f32, 16>, 16>;

fn in_index(m: u32, c: u32) -> u32 {
    let b = m / lin.in_len;
    let l = m % lin.in_len;
    let h = c / lin.in_dim;
    let d = c % lin.in_dim;
    return ((b * lin.in_heads + h) * lin.in_cap + lin.in_off + l) * lin.in_dim + d;
}

fn out_index(m: u32, c: u32) -> u32 {
    let b = m / lin.out_len;
    let l = m % lin.out_len;
    let h = c / lin.out_dim;
    let d = c % lin.out_dim;
    return ((b * lin.out_heads + h) * lin.out_cap + lin.out_off + l) * lin.out_dim + d;
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let tile = wid.x + wid.y * nwg.x;
    let row0 = (tile / lin.tiles_n) * T;
    let col0 = (tile % lin.tiles_n) * T;
    let r = lid.y;
    let c = lid.x;
    var acc = 0.0;
    // The loop bound is uniform, so every invocation reaches every barrier, including
    // those of workgroups past the last tile (the 2-D grid's tail), which write nothing.
    for (var k0 = 0u; k0 < lin.inner; k0 += T) {
        let k = k0 + c;
        var xv = 0.0;
        // Rows past M and columns past K (the last tiles' edges) load zeros.
        if row0 + r < lin.rows && k < lin.inner {
            xv = x[in_index(row0 + r, k)];
        }
        xs[r][c] = xv;
        var wv = 0.0;
        // W rows past N and columns past K (the last tiles' edges) load zeros.
        if col0 + r < lin.cols && k < lin.inner {
            wv = w[(col0 + r) * lin.inner + k];
        }
        ws[r][c] = wv;
        workgroupBarrier();
        for (var kk = 0u; kk < T; kk += 1u) {
            acc += xs[r][kk] * ws[c][kk];
        }
        workgroupBarrier();
    }
    // Only elements inside the M x N output exist.
    if row0 + r < lin.rows && col0 + c < lin.cols {
        y[out_index(row0 + r, col0 + c)] = acc + bias[col0 + c];
    }
}
