// The dense layer y = epilogue(x W^T + b), shaped for hardware GPUs (see
// shaders/prelude/matmul.wgsl for the layouts and the epilogue): a workgroup of 16 x 16
// invocations computes a 64 x 64 tile of y, each invocation a 4 x 4 register micro-tile
// (rows m0 + 4 ty + i, columns n0 + 4 tx + j, four named vec4 accumulators), from
// 16-wide slices of x and W staged in workgroup memory. Every invocation stages one
// vec4 of x and one of W per slice (global loads of four elements), stored transposed
// (k-major) so that the inner product reads a vec4 of four rows and a vec4 of four
// columns per step: 16 FMAs per two workgroup loads. Each staged k row is padded by a
// vec4 (17 vec4s for 16), so the transposed writes spread over the memory banks.
// Two barriers per slice, a constant inner trip count, no private array.

const TS: u32 = 64u;
const BK: u32 = 16u;
const PAD4: u32 = 17u;

// xs[k * PAD4 + r / 4][r % 4] holds x[m0 + r, k0 + k]; ws likewise W[n0 + r, k0 + k].
var<workgroup> xs: array<vec4<f32>, 272>;
var<workgroup> ws: array<vec4<f32>, 272>;

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tile = wid.x + wid.y * nwg.x;
    let m0 = (tile / lin.tiles_n) * TS;
    let n0 = (tile % lin.tiles_n) * TS;
    // Workgroups past the last row tile (the 2-D grid's tail) have nothing to do; the
    // condition is uniform across the workgroup, so no barrier is left waiting.
    if m0 >= lin.rows {
        return;
    }
    // What this invocation stages: tile row sr (of x, and of W: an output column),
    // slice columns sk .. sk + 3. Rows past M and columns past N (the last tiles'
    // edges) stage row M - 1 or N - 1 instead and are never stored.
    let sr = li / 4u;
    let sk = (li % 4u) * 4u;
    let xr = x_row(min(m0 + sr, lin.rows - 1u));
    let wr = min(n0 + sr, lin.cols - 1u) * lin.inner;
    let cell = sr / 4u;
    let part = sr % 4u;
    let tx = lid.x;
    let ty = lid.y;
    var c0 = vec4(0.0);
    var c1 = vec4(0.0);
    var c2 = vec4(0.0);
    var c3 = vec4(0.0);
    let hs = x_head_stride();
    let dim = lin.in_dim;
    for (var h = 0u; h < lin.in_heads; h += 1u) {
        let xo = h * hs;
        let wo = h * dim;
        for (var d = 0u; d < dim; d += BK) {
            let dk = d + sk;
            var xv = vec4(0.0);
            var wv = vec4(0.0);
            // Slice columns past the head's width stage zeros.
            if dk < dim {
                xv = load_x4(xr + xo + dk, dim - dk);
                wv = load_w4(wr + wo + dk, dim - dk);
            }
            xs[(sk + 0u) * PAD4 + cell][part] = xv.x;
            xs[(sk + 1u) * PAD4 + cell][part] = xv.y;
            xs[(sk + 2u) * PAD4 + cell][part] = xv.z;
            xs[(sk + 3u) * PAD4 + cell][part] = xv.w;
            ws[(sk + 0u) * PAD4 + cell][part] = wv.x;
            ws[(sk + 1u) * PAD4 + cell][part] = wv.y;
            ws[(sk + 2u) * PAD4 + cell][part] = wv.z;
            ws[(sk + 3u) * PAD4 + cell][part] = wv.w;
            workgroupBarrier();
            for (var k = 0u; k < BK; k += 1u) {
                let a = xs[k * PAD4 + ty];
                let b = ws[k * PAD4 + tx];
                c0 = fma(vec4(a.x), b, c0);
                c1 = fma(vec4(a.y), b, c1);
                c2 = fma(vec4(a.z), b, c2);
                c3 = fma(vec4(a.w), b, c3);
            }
            workgroupBarrier();
        }
    }
    let n = n0 + 4u * tx + vec4(0u, 1u, 2u, 3u);
    let yc = vec4(y_col(n.x), y_col(n.y), y_col(n.z), y_col(n.w));
    let m = m0 + 4u * ty;
    put4(m, n, yc, c0, true);
    put4(m + 1u, n, yc, c1, true);
    put4(m + 2u, n, yc, c2, true);
    put4(m + 3u, n, yc, c3, true);
}
