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
// workgroup own consecutive columns, so on a GPU their W rows are `row_bytes` apart: on
// GPUs, products of few rows take the entry quant_matmul_split.wgsl instead, in which
// lanes split K.
//
// Row m of y lands at ((b * out_heads + h) * out_cap + out_off + l) * out_dim + d with
// b = m / out_len, l = m % out_len, h = c / out_dim, d = c % out_dim: the layout of the
// crate's linear kernel, so projections write q, k and v straight into their heads.

// Two override constants fold a model's neighbouring kernels into the product, each a
// pass fewer over the rows (on lavapipe every dispatch costs about 0.15 ms, more than a
// small product): NORM applies RMSNorm to x as it is read (x_k * g_k, the row's sum of
// squares gathered from the same loads, the sums scaled by 1 / sqrt(mean + eps) at the
// end), and EPI picks what becomes of the sums:
//   0  stored at the layout above;
//   1  added to y at the layout above (a residual add);
//   2  q, k and v of attention: W's rows are [Wq; Wk; Wv] or a part of them starting at
//      column col0; columns below q_end go to y at the layout above, those below k_end to
//      yk and the rest to yv at the KV layout (kv_heads, kv_cap, kv_off, out_dim), and q
//      and k are rotated by RoPE at position pos0 + l (pairs 2i, 2i + 1 of each head, as
//      rope.wgsl; a position past the table is left as is);
//   3  SwiGLU: W's rows interleave gate and up (row 2j gate j, row 2j + 1 up j), and
//      silu(gate) * up lands in column j of y at the layout above.

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
    eps: f32,
    col0: u32,
    q_end: u32,
    k_end: u32,
    kv_heads: u32,
    kv_cap: u32,
    kv_off: u32,
    pos0: u32,
    positions: u32,
    // W in uniform pages (QuantMatrix's `Pages`): rows a page (0: W's rows lie one after
    // another), bytes from one page to the next, and the dispatch's chunk of pages.
    page_rows: u32,
    page_stride: u32,
    chunk: u32,
    // The paged entry: the row of y its first row of x (x_off in the uniform copy) is.
    row0: u32,
}

@group(0) @binding(0) var<uniform> p: QuantMatmul;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
// NORM: the norm's weight, one per element of a row of x.
@group(0) @binding(4) var<storage, read> nw: array<f32>;
// EPI 2: the RoPE table, (positions, out_dim / 2, 2) cos and sin, and the key and value stores.
@group(0) @binding(5) var<storage, read> table: array<f32>;
@group(0) @binding(6) var<storage, read_write> yk: array<f32>;
@group(0) @binding(7) var<storage, read_write> yv: array<f32>;

// XU (a decoding step's one row, or a short prompt's rows when together they fit in
// XU_ELEMS): x's rows read from a uniform copy, and with NORM the norm's weight from a
// uniform buffer too, rather than from the storage buffers. Every invocation reads the
// same x elements, and lavapipe (Mesa 22) loads from a storage buffer lane by lane, in a
// loop with a bounds check per element, whatever the address; from a uniform buffer a
// load is one gather, or one scalar load where the address is uniform. Before XU, the x
// and norm loads were most of a decoding step's loads. The norm's weights do not change,
// so a model keeps them in a uniform buffer of its own (no copy per product).
struct XRow {
    v: array<vec4<f32>, 2048>,
}
@group(0) @binding(8) var<uniform> xu: XRow;
@group(0) @binding(9) var<uniform> nu: XRow;

// The ggml type of W (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K).
override KIND: u32 = 0u;
// Rows of y per invocation: 1 or 4.
override ROWS: u32 = 1u;
// Whether x is RMS-normed as it is read.
override NORM: bool = false;
// What becomes of the sums (see the top of this file).
override EPI: u32 = 0u;
// Whether x (and the norm's weight) come from the uniform copy `xu`.
override XU: bool = false;
// Columns of y per invocation.
const COLS: u32 = 4u;

// Offsets in x of the tile's rows; rows past the last repeat it (their sums are dropped).
var<private> xr: vec4<u32>;
// The sums of the tile's rows 0 (acc), 1, 2 and 3, each for the invocation's four columns.
var<private> acc: vec4<f32>;
var<private> acc1: vec4<f32>;
var<private> acc2: vec4<f32>;
var<private> acc3: vec4<f32>;
// NORM: the sums of squares of the tile's rows 0, 1, 2 and 3.
var<private> ss: vec4<f32>;
// The first of the invocation's columns (W rows), as `sums` reads it.
var<private> col: u32;

// Elements i..i+4 of x (i a multiple of 4 with XU: rows are whole vec4s).
fn xv(i: u32) -> vec4<f32> {
    if (XU) {
        // i < rows * inner <= 8192, checked by the launcher.
        return xu.v[i >> 2u];
    }
    return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

// Elements k..k+4 of the norm's weight.
fn nv(k: u32) -> vec4<f32> {
    if (XU) {
        // k < inner <= 8192, checked by the launcher.
        return nu.v[k >> 2u];
    }
    return vec4<f32>(nw[k], nw[k + 1u], nw[k + 2u], nw[k + 3u]);
}

// W's rows, for a table in planes (quant_blocks.wgsl's Q8_0_PLANES).
fn plane_rows() -> u32 {
    return p.cols;
}

// Required by quant_blocks.wgsl's one-row decoders, which this kernel does not call
// (the quantized embedding gather does); it accumulates like take4's first column.
fn take(v: vec4<f32>, k: u32) {
    acc.x += dot(v, xv(xr.x + k));
}

// Row r of x at elements k..k+4, normed by the weight when NORM (its square gathered).
fn xin(i: u32, k: u32, r: u32) -> vec4<f32> {
    let v = xv(i + k);
    if (!NORM) {
        return v;
    }
    ss[r] += dot(v, v);
    return v * nv(k);
}

// Elements k..k+4 of four W rows (columns c..c+4 of y), against every row of the tile:
// row r of the tile accumulates into acc (r = 0) or accr.
fn take4(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, k: u32) {
    let x0 = xin(xr.x, k, 0u);
    acc += vec4<f32>(dot(a, x0), dot(b, x0), dot(c, x0), dot(d, x0));
    if (ROWS > 1u) {
        let x1 = xin(xr.y, k, 1u);
        acc1 += vec4<f32>(dot(a, x1), dot(b, x1), dot(c, x1), dot(d, x1));
        let x2 = xin(xr.z, k, 2u);
        acc2 += vec4<f32>(dot(a, x2), dot(b, x2), dot(c, x2), dot(d, x2));
        let x3 = xin(xr.w, k, 3u);
        acc3 += vec4<f32>(dot(a, x3), dot(b, x3), dot(c, x3), dot(d, x3));
    }
}

// Pages a dispatch of the paged entry binds (quant_matmul_paged.wgsl), and the columns
// each of its invocations owns (four from each group of four pages).
const PAGES: u32 = 12u;

// Byte offset of W's row c. Paged, chunk d of PAGES pages holds rows d * PAGES * S ..
// with S = page_rows: page 4g + j of the chunk, slot s, holds row d * PAGES * S +
// 4 S g + 4 s + j, so that one invocation of the paged entry reads its columns from
// its slot of every page.
fn row_at(c: u32) -> u32 {
    let rs = p.page_rows;
    if (rs == 0u) {
        return c * p.row_bytes;
    }
    let d = c / (PAGES * rs);
    let r = c % (PAGES * rs);
    let page = d * PAGES + (r / (4u * rs)) * 4u + r % 4u;
    return page * p.page_stride + ((r % (4u * rs)) / 4u) * p.row_bytes;
}

// Where row m, column c of an output with `heads` heads of `cap` rows lands.
fn at(m: u32, c: u32, heads: u32, cap: u32, off: u32) -> u32 {
    let b = m / p.out_len;
    let l = m % p.out_len;
    return ((b * heads + c / p.out_dim) * cap + off + l) * p.out_dim + c % p.out_dim;
}

fn put(m: u32, c: u32, v: f32) {
    let i = at(m, c, p.out_heads, p.out_cap, p.out_off);
    if (EPI == 1u) {
        y[i] += v;
    } else {
        y[i] = v;
    }
}

// Columns c..c+4 of row m, those inside y (rows and columns past the last were repeats).
fn plain4(m: u32, c: u32, v: vec4<f32>) {
    put(m, c, v.x);
    if (c + 1u < p.cols) {
        put(m, c + 1u, v.y);
    }
    if (c + 2u < p.cols) {
        put(m, c + 2u, v.z);
    }
    if (c + 3u < p.cols) {
        put(m, c + 3u, v.w);
    }
}

// The pair of columns c, c + 1 of the attention space (c even) of row m: rotated when in
// q or k, then stored where the column belongs.
fn qkv_pair(m: u32, c: u32, v: vec2<f32>) {
    var r = v;
    var cc = c;
    var dest = 0u;
    if (c >= p.k_end) {
        cc = c - p.k_end;
        dest = 2u;
    } else if (c >= p.q_end) {
        cc = c - p.q_end;
        dest = 1u;
    }
    let pos = p.pos0 + m % p.out_len;
    if (dest < 2u && pos < p.positions) {
        let half = p.out_dim / 2u;
        let t = (pos * half + (cc % p.out_dim) / 2u) * 2u;
        let cs = table[t];
        let sn = table[t + 1u];
        r = vec2<f32>(v.x * cs - v.y * sn, v.x * sn + v.y * cs);
    }
    if (dest == 0u) {
        let i = at(m, cc, p.out_heads, p.out_cap, p.out_off);
        y[i] = r.x;
        y[i + 1u] = r.y;
    } else if (dest == 1u) {
        let i = at(m, cc, p.kv_heads, p.kv_cap, p.kv_off);
        yk[i] = r.x;
        yk[i + 1u] = r.y;
    } else {
        let i = at(m, cc, p.kv_heads, p.kv_cap, p.kv_off);
        yv[i] = r.x;
        yv[i + 1u] = r.y;
    }
}

fn silu_times(g: f32, u: f32) -> f32 {
    // For g far below 0, exp(-g) is inf and g / inf is -0: the limit, no NaN.
    return g / (1.0 + exp(-g)) * u;
}

// The tile's sums for row m, columns c..c+4 of W, finished as EPI says.
fn finish(m: u32, c: u32, v: vec4<f32>) {
    if (m >= p.rows) {
        return;
    }
    if (EPI == 2u) {
        // Columns come in pairs: q_end, k_end, the head width and cols are even.
        qkv_pair(m, p.col0 + c, v.xy);
        if (c + 2u < p.cols) {
            qkv_pair(m, p.col0 + c + 2u, v.zw);
        }
    } else if (EPI == 3u) {
        put(m, c / 2u, silu_times(v.x, v.y));
        if (c + 2u < p.cols) {
            put(m, c / 2u + 1u, silu_times(v.z, v.w));
        }
    } else {
        plain4(m, c, v);
    }
}

// The factor RMSNorm scales the sums of row r by, when NORM (`row_ss` is the entry
// file's: the row's sum of squares).
fn norm_scale(r: u32) -> f32 {
    if (!NORM) {
        return 1.0;
    }
    return 1.0 / sqrt(row_ss(r) / f32(p.inner) + p.eps);
}

// The sums of rows m0 .. m0 + ROWS of x against W's rows c .. c + 4 (columns of y) over
// blocks first, first + step, ... of K, into acc .. acc3 (and ss with NORM). Rows and
// columns past the last repeat the last one's loads; `finish_tile` drops their sums.
fn sums(m0: u32, c: u32, first: u32, step: u32) {
    let last = p.rows - 1u;
    let ms = min(vec4<u32>(m0, m0 + 1u, m0 + 2u, m0 + 3u), vec4<u32>(last));
    xr = p.x_off + ms * p.x_stride;
    acc = vec4<f32>(0.0);
    acc1 = vec4<f32>(0.0);
    acc2 = vec4<f32>(0.0);
    acc3 = vec4<f32>(0.0);
    ss = vec4<f32>(0.0);
    let shape = block_shape();
    let blocks = p.inner / shape.x;
    let lc = p.cols - 1u;
    let cs = min(vec4<u32>(c, c + 1u, c + 2u, c + 3u), vec4<u32>(lc));
    col = cs.x;
    let rows = vec4<u32>(row_at(cs.x), row_at(cs.y), row_at(cs.z), row_at(cs.w));
    for (var b = first; b < blocks; b += step) {
        block4(rows + vec4<u32>(b * shape.y), b * shape.x);
    }
}

// The tile's sums finished and stored as EPI says, for columns c .. c + 4 of rows m0 ..
// (`finish` drops rows past the last; columns past the last store nothing).
fn finish_tile(m0: u32, c: u32) {
    if (c >= p.cols) {
        return;
    }
    finish(m0, c, acc * norm_scale(0u));
    if (ROWS > 1u) {
        finish(m0 + 1u, c, acc1 * norm_scale(1u));
        finish(m0 + 2u, c, acc2 * norm_scale(2u));
        finish(m0 + 3u, c, acc3 * norm_scale(3u));
    }
}

// Invocation `lid` of workgroup `g` (64 invocations, the entry file's workgroup size).
// An invocation past the last column or row leaves when the entry file's `idle` says so;
// one that stays (a lane the subgroup entry's broadcasts need) repeats the last column's
// and row's loads and stores nothing.
fn product(g: u32, lid: u32) {
    let groups = (p.cols + 64u * COLS - 1u) / (64u * COLS);
    let c = ((g % groups) * 64u + lid) * COLS;
    let m0 = (g / groups) * ROWS;
    if (idle(c >= p.cols || m0 >= p.rows)) {
        return;
    }
    sums(m0, c, 0u, 1u);
    // After the loop, so every lane took part in it.
    finish_tile(m0, c);
}
