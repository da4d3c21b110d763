// y = x Wᵀ with W (cols, inner) kept as its GGUF blocks (quant_blocks.wgsl and
// quant_blocks4.wgsl, which this source follows), accumulating in f32: each invocation
// owns four consecutive columns of y and ROWS rows of x (1 for a decoding step, 4
// otherwise), decodes the four W rows' blocks side by side in registers and multiplies
// them into every row of its tile, so that each x element is loaded once for four
// columns and each W element once for the tile's rows. On lavapipe the x loads, one per
// lane even though every lane reads the same address, were over half of a decoding step
// when an invocation owned one column.
//
// Why an invocation per column rather than lanes splitting K: on a CPU driver (lavapipe)
// an invocation is a SIMD lane, and the x elements every lane reads are then the same
// address (a broadcast, not a gather), while each lane's W words are one gather per word
// whatever the split; there is no cross-lane reduction and no barrier. Invocations of a
// workgroup own consecutive columns, so on a GPU their W rows are `row_bytes` apart.
//
// Row m of y lands at ((b * out_heads + h) * out_cap + out_off + l) * out_dim + d with
// b = m / out_len, l = m % out_len, h = c / out_dim, d = c % out_dim: the layout of the
// crate's linear kernel, so projections write q, k and v straight into their heads.

// Must match `QuantMatmulParams` in src/model/ops/quant_matmul.rs.
struct QuantMatmul {
    rows: u32,
    cols: u32,
    inner: u32,
    row_bytes: u32,
    x_off: u32,
    x_stride: u32,
    out_len: u32,
    out_heads: u32,
    out_dim: u32,
    out_cap: u32,
    out_off: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: QuantMatmul;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// The ggml type of W (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K).
override KIND: u32 = 0u;
// Rows of y per invocation: 1 or 4.
override ROWS: u32 = 1u;
// Columns of y per invocation.
const COLS: u32 = 4u;

// Offsets in x of the tile's rows; rows past the last repeat it (their sums are dropped).
var<private> xr: vec4<u32>;
// The sums of the tile's rows 0 (acc), 1, 2 and 3, each for the invocation's four columns.
var<private> acc: vec4<f32>;
var<private> acc1: vec4<f32>;
var<private> acc2: vec4<f32>;
var<private> acc3: vec4<f32>;

fn xv(i: u32) -> vec4<f32> {
    return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

// Required by quant_blocks.wgsl's one-row decoders, which this kernel does not call
// (the quantized embedding gather does); it accumulates like take4's first column.
fn take(v: vec4<f32>, k: u32) {
    acc.x += dot(v, xv(xr.x + k));
}

// Elements k..k+4 of four W rows (columns c..c+4 of y), against every row of the tile:
// row r of the tile accumulates into acc (r = 0) or accr.
fn take4(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, k: u32) {
    let x0 = xv(xr.x + k);
    acc += vec4<f32>(dot(a, x0), dot(b, x0), dot(c, x0), dot(d, x0));
    if (ROWS > 1u) {
        let x1 = xv(xr.y + k);
        acc1 += vec4<f32>(dot(a, x1), dot(b, x1), dot(c, x1), dot(d, x1));
        let x2 = xv(xr.z + k);
        acc2 += vec4<f32>(dot(a, x2), dot(b, x2), dot(c, x2), dot(d, x2));
        let x3 = xv(xr.w + k);
        acc3 += vec4<f32>(dot(a, x3), dot(b, x3), dot(c, x3), dot(d, x3));
    }
}

fn store(m: u32, c: u32, v: f32) {
    let b = m / p.out_len;
    let l = m % p.out_len;
    let h = c / p.out_dim;
    y[((b * p.out_heads + h) * p.out_cap + p.out_off + l) * p.out_dim + c % p.out_dim] = v;
}

// Columns c..c+4 of row m, those inside y (rows and columns past the last were repeats).
fn store4(m: u32, c: u32, v: vec4<f32>) {
    if (m >= p.rows) {
        return;
    }
    store(m, c, v.x);
    if (c + 1u < p.cols) {
        store(m, c + 1u, v.y);
    }
    if (c + 2u < p.cols) {
        store(m, c + 2u, v.z);
    }
    if (c + 3u < p.cols) {
        store(m, c + 3u, v.w);
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    let groups = (p.cols + 64u * COLS - 1u) / (64u * COLS);
    let c = ((g % groups) * 64u + lid) * COLS;
    let m0 = (g / groups) * ROWS;
    if (c >= p.cols || m0 >= p.rows) {
        return;
    }
    let last = p.rows - 1u;
    let ms = vec4<u32>(m0, min(m0 + 1u, last), min(m0 + 2u, last), min(m0 + 3u, last));
    xr = p.x_off + ms * p.x_stride;
    acc = vec4<f32>(0.0);
    acc1 = vec4<f32>(0.0);
    acc2 = vec4<f32>(0.0);
    acc3 = vec4<f32>(0.0);
    let shape = block_shape();
    let blocks = p.inner / shape.x;
    // Columns past the last repeat it (their sums are dropped).
    let lc = p.cols - 1u;
    let cs = vec4<u32>(c, min(c + 1u, lc), min(c + 2u, lc), min(c + 3u, lc));
    let rows = cs * p.row_bytes;
    for (var b = 0u; b < blocks; b++) {
        decode_block4(rows + vec4<u32>(b * shape.y), b * shape.x);
    }
    store4(m0, c, acc);
    if (ROWS > 1u) {
        store4(m0 + 1u, c, acc1);
        store4(m0 + 2u, c, acc2);
        store4(m0 + 3u, c, acc3);
    }
}
