// Shared by the dense-layer kernels (matmul_tiled.wgsl, matmul_lanes.wgsl,
// matmul_split.wgsl): y = epilogue(x W^T + b), W stored as the checkpoints store it,
// (N, K) row-major, so that row n of W is output column n.
//
// x and y are read and written through a head layout, so that one kernel both splits
// projections into heads (B, H, L, D) and merges heads back into rows (B, L, E):
// row m is (b, l) with b = m / len, l = m % len; column c is (h, d) with h = c / dim,
// d = c % dim; the element lives at ((b * heads + h) * cap + off + l) * dim + d.
// A plain row-major (M, K) matrix is len = cap = M, heads = 1, dim = K, off = 0.
// `off` and `cap` place a step's keys and values at their position in a KV cache.
// The element index splits into a row part and a column part,
//     ((b * heads) * cap + off + l) * dim   +   h * cap * dim + d,
// so the kernels divide once per row and once per column, never per load: the shared
// width K is walked head by head (x_head_stride apart), dim columns each.

// Must match `LinearParams` in src/gpu/kernels/linear.rs.
struct Linear {
    // M: rows of x and y.
    rows: u32,
    // N: columns of y, rows of W.
    cols: u32,
    // K: columns of x and W (= in_heads * in_dim, checked by the host).
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
    // Bit 0: add the residual tensor (read in y's layout); bit 1: GELU (erf form) after
    // the bias and before the residual.
    flags: u32,
    _pad0: u32,
}

const LINEAR_RESIDUAL: u32 = 1u;
const LINEAR_GELU: u32 = 2u;

@group(0) @binding(0) var<uniform> lin: Linear;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> residual: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

// Element index of row m, column 0 of x.
fn x_row(m: u32) -> u32 {
    let b = m / lin.in_len;
    let l = m % lin.in_len;
    return (b * lin.in_heads * lin.in_cap + lin.in_off + l) * lin.in_dim;
}

// Distance between the heads of one row of x.
fn x_head_stride() -> u32 {
    return lin.in_cap * lin.in_dim;
}

// Element index of row m, column 0 of y (and of the residual).
fn y_row(m: u32) -> u32 {
    let b = m / lin.out_len;
    let l = m % lin.out_len;
    return (b * lin.out_heads * lin.out_cap + lin.out_off + l) * lin.out_dim;
}

// Offset of column n within a row of y.
fn y_col(n: u32) -> u32 {
    return (n / lin.out_dim) * lin.out_cap * lin.out_dim + n % lin.out_dim;
}

// erfc from the Chebyshev fit of Numerical Recipes (erfcc, fractional error below
// 1.2e-7 for every argument), as shaders/model/gelu.wgsl computes it.
fn linear_erfc(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * exp(poly);
    return select(2.0 - r, r, x >= 0.0);
}

// The finished element at y index `i` for column n from its dot product: bias, then
// GELU x/2 erfc(-x/sqrt(2)), then the residual, as the flags ask.
fn finish(acc: f32, i: u32, n: u32) -> f32 {
    var v = acc + bias[n];
    if (lin.flags & LINEAR_GELU) != 0u {
        v = 0.5 * v * linear_erfc(-v * 0.70710678118654752);
    }
    if (lin.flags & LINEAR_RESIDUAL) != 0u {
        v += residual[i];
    }
    return v;
}

// A quiet NaN, from a private variable so that the bitcast is a runtime expression
// (WGSL makes a constant expression that evaluates to NaN a shader-creation error).
var<private> LINEAR_NAN_BITS: u32 = 0x7fc00000u;

// Writes the dot product `acc` of a row whose y row index is yr and column n (at
// offset yc in the row), finished; NaN where `ok` is false (a kernel's own check of the
// driver's promises failed). Columns past N (a tile's edge) do not exist and are not
// written; callers skip rows past M.
fn put(yr: u32, n: u32, yc: u32, acc: f32, ok: bool) {
    if n < lin.cols {
        let i = yr + yc;
        y[i] = select(bitcast<f32>(LINEAR_NAN_BITS), finish(acc, i, n), ok);
    }
}

// Row m of the output tile: columns n (their offsets in a row of y: yc) from a; `ok`
// false writes NaN (lanes not as promised).
fn put4(m: u32, n: vec4<u32>, yc: vec4<u32>, a: vec4<f32>, ok: bool) {
    // Rows past M (the last tile's edge) do not exist.
    if m >= lin.rows {
        return;
    }
    let yr = y_row(m);
    put(yr, n.x, yc.x, a.x, ok);
    put(yr, n.y, yc.y, a.y, ok);
    put(yr, n.z, yc.z, a.z, ok);
    put(yr, n.w, yc.w, a.w, ok);
}
