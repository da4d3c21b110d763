// The dense layer y = epilogue(x W^T + b) for few rows on GPUs (a decoding step's one,
// a short input's few; see shaders/prelude/matmul.wgsl for the layouts and the
// epilogue): K is split across lanes. The 64 invocations of a workgroup are four groups
// of SPLIT = 16 lanes; each group owns four columns of y (a workgroup 16) and ROWS rows
// of x, and lane s of a group takes the four-element chunks s, s + 16, s + 32, ... of K
// (walked head by head, as the other kernels do): per chunk, one vec4 of each of the
// group's four W rows and of each of its rows of x, so that neighbouring lanes read
// neighbouring chunks of one W row rather than rows K apart (the tiled kernel's 64-row
// tile would leave 63 of its 64 rows idle for one row of x). The lanes' partial sums are
// added in a fixed order through workgroup memory, and the group's first lane stores the
// finished columns. No private array; every index is clamped or guarded (the specs are
// trusted: no runtime bounds checks).

// Rows of x per workgroup: 1 or 4.
override ROWS: u32 = 1u;

const SPLIT: u32 = 16u;
const GROUPS: u32 = 4u;

// Lane li's partial sums of row r (of the workgroup's ROWS) at r * 64 + li.
var<workgroup> part: array<vec4<f32>, 256>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tile = wid.x + wid.y * nwg.x;
    let m0 = (tile / lin.tiles_n) * ROWS;
    let s = li % SPLIT;
    let n0 = (tile % lin.tiles_n) * (GROUPS * 4u) + (li / SPLIT) * 4u;
    // Workgroups past the last row group (the 2-D grid's tail) have nothing to do; the
    // condition is uniform across the workgroup, so no barrier is left waiting.
    if m0 >= lin.rows {
        return;
    }
    // Rows past M and columns past N read row M - 1 and column N - 1 instead and are
    // never stored.
    let last = lin.rows - 1u;
    let xr = vec4(
        x_row(m0),
        x_row(min(m0 + 1u, last)),
        x_row(min(m0 + 2u, last)),
        x_row(min(m0 + 3u, last)),
    );
    let lc = lin.cols - 1u;
    let wr = min(n0 + vec4(0u, 1u, 2u, 3u), vec4(lc)) * lin.inner;
    var a0 = vec4(0.0);
    var a1 = vec4(0.0);
    var a2 = vec4(0.0);
    var a3 = vec4(0.0);
    let hs = x_head_stride();
    let dim = lin.in_dim;
    let per_head = (dim + 3u) / 4u;
    let chunks = lin.in_heads * per_head;
    for (var c = s; c < chunks; c += SPLIT) {
        let h = c / per_head;
        let dk = (c % per_head) * 4u;
        // Elements of the head from dk on: a chunk past the head's width reads zeros.
        let left = dim - dk;
        let xo = h * hs + dk;
        let wo = h * dim + dk;
        let w0 = load_w4(wr.x + wo, left);
        let w1 = load_w4(wr.y + wo, left);
        let w2 = load_w4(wr.z + wo, left);
        let w3 = load_w4(wr.w + wo, left);
        let x0 = load_x4(xr.x + xo, left);
        a0 += vec4(dot(x0, w0), dot(x0, w1), dot(x0, w2), dot(x0, w3));
        if ROWS > 1u {
            let x1 = load_x4(xr.y + xo, left);
            a1 += vec4(dot(x1, w0), dot(x1, w1), dot(x1, w2), dot(x1, w3));
            let x2 = load_x4(xr.z + xo, left);
            a2 += vec4(dot(x2, w0), dot(x2, w1), dot(x2, w2), dot(x2, w3));
            let x3 = load_x4(xr.w + xo, left);
            a3 += vec4(dot(x3, w0), dot(x3, w1), dot(x3, w2), dot(x3, w3));
        }
    }
    part[li] = a0;
    part[64u + li] = a1;
    part[128u + li] = a2;
    part[192u + li] = a3;
    workgroupBarrier();
    if s != 0u {
        return;
    }
    // In a fixed order, so a result does not depend on the adapter's scheduling.
    for (var i = 1u; i < SPLIT; i += 1u) {
        a0 += part[li + i];
        a1 += part[64u + li + i];
        a2 += part[128u + li + i];
        a3 += part[192u + li + i];
    }
    let n = n0 + vec4(0u, 1u, 2u, 3u);
    let yc = vec4(y_col(n.x), y_col(n.y), y_col(n.z), y_col(n.w));
    put4(m0, n, yc, a0, true);
    if ROWS > 1u {
        put4(m0 + 1u, n, yc, a1, true);
        put4(m0 + 2u, n, yc, a2, true);
        put4(m0 + 3u, n, yc, a3, true);
    }
}
