// The dense layer y = epilogue(x W^T + b) for adapters whose subgroups are the SIMD lanes
// of a CPU (lavapipe; the same computation, bindings and layouts as matmul_tiled.wgsl,
// see shaders/prelude/matmul.wgsl).
//
// Why this shape. On a software rasteriser every load from a storage buffer or from
// workgroup memory is a loop over the lanes, one scalar at a time, whatever the address,
// while arithmetic on private values is one SIMD instruction for all lanes and a
// subgroup broadcast from a constant lane is a register shuffle (see fused_lanes.wgsl).
// So a workgroup is one subgroup of 8 invocations and every element of x and W it needs
// is loaded once, by one lane: lane c loads rows m0 + c + 8 g of x (g < ROW_GROUPS) and
// rows n0 + c + 8 j of W (output columns; j < 4 COL_SETS), and every lane takes each x
// row from its lane with subgroupBroadcast. Lane c then holds, as named vec4s, the dot
// products of all 8 ROW_GROUPS rows with its own 4 COL_SETS columns: a_r for columns
// n0 + c + (0, 8, 16, 24), b_r for the next 32. Each loaded vec4 of W feeds 8 ROW_GROUPS
// rows, each of x 4 COL_SETS columns in each of 8 lanes. No workgroup memory, no barrier,
// no private array, every loop bound uniform.
//
// The micro-tile is written out for the largest shape (32 rows, 64 columns); override
// constants switch rows and columns off in groups, and the driver removes the code of
// the groups switched off, so every variant compiles from the same text.
//
// Offered only where the adapter's subgroup size is fixed at 8 (src/gpu/kernels/linear.rs);
// `main` still checks that its lanes are the workgroup's invocations in order, and
// otherwise writes NaN rather than a wrong result.

// Row groups of 8 rows per workgroup: 1 to 4.
override ROW_GROUPS: u32 = 2u;
// Sets of 32 columns per workgroup: 1 or 2.
override COL_SETS: u32 = 1u;

const SG: u32 = 8u;

// a + x t^T: row a of 4 dot products, advanced by four columns of x (t holds, in t[i],
// element i of each of the four W rows).
fn mac(a: vec4<f32>, x: vec4<f32>, t: mat4x4<f32>) -> vec4<f32> {
    return fma(vec4(x.w), t[3], fma(vec4(x.z), t[2], fma(vec4(x.y), t[1], fma(vec4(x.x), t[0], a))));
}

// Four columns of each of the W rows starting at elements e (one row per component),
// transposed for mac.
fn w_block(e: vec4<u32>, left: u32) -> mat4x4<f32> {
    return transpose(mat4x4<f32>(load_w4(e.x, left), load_w4(e.y, left), load_w4(e.z, left), load_w4(e.w, left)));
}

@compute @workgroup_size(8)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_id: u32,
) {
    let tile = wid.x + wid.y * nwg.x;
    let m0 = (tile / lin.tiles_n) * SG * ROW_GROUPS;
    let n0 = (tile % lin.tiles_n) * 4u * SG * COL_SETS;
    // Workgroups past the last row tile (the 2-D grid's tail) have nothing to do; the
    // condition is uniform across the workgroup.
    if m0 >= lin.rows {
        return;
    }
    // Broadcasts from lane c must read invocation c's values: one subgroup, in order.
    let lanes_ok = subgroupAll(sg_size == SG && sg_id == li);
    let last_m = lin.rows - 1u;
    let last_n = lin.cols - 1u;
    // Rows of x this lane loads for all: m0 + li + 8 g. Rows past M (the last tile's
    // edge) read row M - 1 instead and are never stored.
    let xr0 = x_row(min(m0 + li, last_m));
    let xr1 = x_row(min(m0 + li + 8u, last_m));
    let xr2 = x_row(min(m0 + li + 16u, last_m));
    let xr3 = x_row(min(m0 + li + 24u, last_m));
    // This lane's columns (rows of W): n0 + li + 8 j. Columns past N (the last tile's
    // edge) read row N - 1 of W instead and are never stored.
    let na = n0 + li + vec4(0u, 8u, 16u, 24u);
    let nb = na + vec4(32u);
    let wa = min(na, vec4(last_n)) * lin.inner;
    let wb = min(nb, vec4(last_n)) * lin.inner;
    var a0 = vec4(0.0);
    var a1 = vec4(0.0);
    var a2 = vec4(0.0);
    var a3 = vec4(0.0);
    var a4 = vec4(0.0);
    var a5 = vec4(0.0);
    var a6 = vec4(0.0);
    var a7 = vec4(0.0);
    var a8 = vec4(0.0);
    var a9 = vec4(0.0);
    var a10 = vec4(0.0);
    var a11 = vec4(0.0);
    var a12 = vec4(0.0);
    var a13 = vec4(0.0);
    var a14 = vec4(0.0);
    var a15 = vec4(0.0);
    var a16 = vec4(0.0);
    var a17 = vec4(0.0);
    var a18 = vec4(0.0);
    var a19 = vec4(0.0);
    var a20 = vec4(0.0);
    var a21 = vec4(0.0);
    var a22 = vec4(0.0);
    var a23 = vec4(0.0);
    var a24 = vec4(0.0);
    var a25 = vec4(0.0);
    var a26 = vec4(0.0);
    var a27 = vec4(0.0);
    var a28 = vec4(0.0);
    var a29 = vec4(0.0);
    var a30 = vec4(0.0);
    var a31 = vec4(0.0);
    var b0 = vec4(0.0);
    var b1 = vec4(0.0);
    var b2 = vec4(0.0);
    var b3 = vec4(0.0);
    var b4 = vec4(0.0);
    var b5 = vec4(0.0);
    var b6 = vec4(0.0);
    var b7 = vec4(0.0);
    var b8 = vec4(0.0);
    var b9 = vec4(0.0);
    var b10 = vec4(0.0);
    var b11 = vec4(0.0);
    var b12 = vec4(0.0);
    var b13 = vec4(0.0);
    var b14 = vec4(0.0);
    var b15 = vec4(0.0);
    var b16 = vec4(0.0);
    var b17 = vec4(0.0);
    var b18 = vec4(0.0);
    var b19 = vec4(0.0);
    var b20 = vec4(0.0);
    var b21 = vec4(0.0);
    var b22 = vec4(0.0);
    var b23 = vec4(0.0);
    var b24 = vec4(0.0);
    var b25 = vec4(0.0);
    var b26 = vec4(0.0);
    var b27 = vec4(0.0);
    var b28 = vec4(0.0);
    var b29 = vec4(0.0);
    var b30 = vec4(0.0);
    var b31 = vec4(0.0);
    let hs = x_head_stride();
    let dim = lin.in_dim;
    for (var h = 0u; h < lin.in_heads; h += 1u) {
        let xo = h * hs;
        let wo = vec4(h * dim);
        for (var d = 0u; d < dim; d += 4u) {
            // Columns d .. d + 3 of head h; past the head's width they read as zeros.
            let left = dim - d;
            let ta = w_block(wa + wo + vec4(d), left);
            var tb = ta;
            if COL_SETS > 1u {
                tb = w_block(wb + wo + vec4(d), left);
            }
            let x0 = load_x4(xr0 + xo + d, left);
            let s0 = subgroupBroadcast(x0, 0u);
            let s1 = subgroupBroadcast(x0, 1u);
            let s2 = subgroupBroadcast(x0, 2u);
            let s3 = subgroupBroadcast(x0, 3u);
            let s4 = subgroupBroadcast(x0, 4u);
            let s5 = subgroupBroadcast(x0, 5u);
            let s6 = subgroupBroadcast(x0, 6u);
            let s7 = subgroupBroadcast(x0, 7u);
            a0 = mac(a0, s0, ta);
            a1 = mac(a1, s1, ta);
            a2 = mac(a2, s2, ta);
            a3 = mac(a3, s3, ta);
            a4 = mac(a4, s4, ta);
            a5 = mac(a5, s5, ta);
            a6 = mac(a6, s6, ta);
            a7 = mac(a7, s7, ta);
            if COL_SETS > 1u {
                b0 = mac(b0, s0, tb);
                b1 = mac(b1, s1, tb);
                b2 = mac(b2, s2, tb);
                b3 = mac(b3, s3, tb);
                b4 = mac(b4, s4, tb);
                b5 = mac(b5, s5, tb);
                b6 = mac(b6, s6, tb);
                b7 = mac(b7, s7, tb);
            }
            if ROW_GROUPS > 1u {
                let x1 = load_x4(xr1 + xo + d, left);
                let s8 = subgroupBroadcast(x1, 0u);
                let s9 = subgroupBroadcast(x1, 1u);
                let s10 = subgroupBroadcast(x1, 2u);
                let s11 = subgroupBroadcast(x1, 3u);
                let s12 = subgroupBroadcast(x1, 4u);
                let s13 = subgroupBroadcast(x1, 5u);
                let s14 = subgroupBroadcast(x1, 6u);
                let s15 = subgroupBroadcast(x1, 7u);
                a8 = mac(a8, s8, ta);
                a9 = mac(a9, s9, ta);
                a10 = mac(a10, s10, ta);
                a11 = mac(a11, s11, ta);
                a12 = mac(a12, s12, ta);
                a13 = mac(a13, s13, ta);
                a14 = mac(a14, s14, ta);
                a15 = mac(a15, s15, ta);
                if COL_SETS > 1u {
                    b8 = mac(b8, s8, tb);
                    b9 = mac(b9, s9, tb);
                    b10 = mac(b10, s10, tb);
                    b11 = mac(b11, s11, tb);
                    b12 = mac(b12, s12, tb);
                    b13 = mac(b13, s13, tb);
                    b14 = mac(b14, s14, tb);
                    b15 = mac(b15, s15, tb);
                }
            }
            if ROW_GROUPS > 2u {
                let x2 = load_x4(xr2 + xo + d, left);
                let s16 = subgroupBroadcast(x2, 0u);
                let s17 = subgroupBroadcast(x2, 1u);
                let s18 = subgroupBroadcast(x2, 2u);
                let s19 = subgroupBroadcast(x2, 3u);
                let s20 = subgroupBroadcast(x2, 4u);
                let s21 = subgroupBroadcast(x2, 5u);
                let s22 = subgroupBroadcast(x2, 6u);
                let s23 = subgroupBroadcast(x2, 7u);
                a16 = mac(a16, s16, ta);
                a17 = mac(a17, s17, ta);
                a18 = mac(a18, s18, ta);
                a19 = mac(a19, s19, ta);
                a20 = mac(a20, s20, ta);
                a21 = mac(a21, s21, ta);
                a22 = mac(a22, s22, ta);
                a23 = mac(a23, s23, ta);
                if COL_SETS > 1u {
                    b16 = mac(b16, s16, tb);
                    b17 = mac(b17, s17, tb);
                    b18 = mac(b18, s18, tb);
                    b19 = mac(b19, s19, tb);
                    b20 = mac(b20, s20, tb);
                    b21 = mac(b21, s21, tb);
                    b22 = mac(b22, s22, tb);
                    b23 = mac(b23, s23, tb);
                }
            }
            if ROW_GROUPS > 3u {
                let x3 = load_x4(xr3 + xo + d, left);
                let s24 = subgroupBroadcast(x3, 0u);
                let s25 = subgroupBroadcast(x3, 1u);
                let s26 = subgroupBroadcast(x3, 2u);
                let s27 = subgroupBroadcast(x3, 3u);
                let s28 = subgroupBroadcast(x3, 4u);
                let s29 = subgroupBroadcast(x3, 5u);
                let s30 = subgroupBroadcast(x3, 6u);
                let s31 = subgroupBroadcast(x3, 7u);
                a24 = mac(a24, s24, ta);
                a25 = mac(a25, s25, ta);
                a26 = mac(a26, s26, ta);
                a27 = mac(a27, s27, ta);
                a28 = mac(a28, s28, ta);
                a29 = mac(a29, s29, ta);
                a30 = mac(a30, s30, ta);
                a31 = mac(a31, s31, ta);
                if COL_SETS > 1u {
                    b24 = mac(b24, s24, tb);
                    b25 = mac(b25, s25, tb);
                    b26 = mac(b26, s26, tb);
                    b27 = mac(b27, s27, tb);
                    b28 = mac(b28, s28, tb);
                    b29 = mac(b29, s29, tb);
                    b30 = mac(b30, s30, tb);
                    b31 = mac(b31, s31, tb);
                }
            }
        }
    }
    let yca = vec4(y_col(na.x), y_col(na.y), y_col(na.z), y_col(na.w));
    let ycb = vec4(y_col(nb.x), y_col(nb.y), y_col(nb.z), y_col(nb.w));
    put4(m0 + 0u, na, yca, a0, lanes_ok);
    put4(m0 + 1u, na, yca, a1, lanes_ok);
    put4(m0 + 2u, na, yca, a2, lanes_ok);
    put4(m0 + 3u, na, yca, a3, lanes_ok);
    put4(m0 + 4u, na, yca, a4, lanes_ok);
    put4(m0 + 5u, na, yca, a5, lanes_ok);
    put4(m0 + 6u, na, yca, a6, lanes_ok);
    put4(m0 + 7u, na, yca, a7, lanes_ok);
    if COL_SETS > 1u {
        put4(m0 + 0u, nb, ycb, b0, lanes_ok);
        put4(m0 + 1u, nb, ycb, b1, lanes_ok);
        put4(m0 + 2u, nb, ycb, b2, lanes_ok);
        put4(m0 + 3u, nb, ycb, b3, lanes_ok);
        put4(m0 + 4u, nb, ycb, b4, lanes_ok);
        put4(m0 + 5u, nb, ycb, b5, lanes_ok);
        put4(m0 + 6u, nb, ycb, b6, lanes_ok);
        put4(m0 + 7u, nb, ycb, b7, lanes_ok);
    }
    if ROW_GROUPS > 1u {
        put4(m0 + 8u, na, yca, a8, lanes_ok);
        put4(m0 + 9u, na, yca, a9, lanes_ok);
        put4(m0 + 10u, na, yca, a10, lanes_ok);
        put4(m0 + 11u, na, yca, a11, lanes_ok);
        put4(m0 + 12u, na, yca, a12, lanes_ok);
        put4(m0 + 13u, na, yca, a13, lanes_ok);
        put4(m0 + 14u, na, yca, a14, lanes_ok);
        put4(m0 + 15u, na, yca, a15, lanes_ok);
        if COL_SETS > 1u {
            put4(m0 + 8u, nb, ycb, b8, lanes_ok);
            put4(m0 + 9u, nb, ycb, b9, lanes_ok);
            put4(m0 + 10u, nb, ycb, b10, lanes_ok);
            put4(m0 + 11u, nb, ycb, b11, lanes_ok);
            put4(m0 + 12u, nb, ycb, b12, lanes_ok);
            put4(m0 + 13u, nb, ycb, b13, lanes_ok);
            put4(m0 + 14u, nb, ycb, b14, lanes_ok);
            put4(m0 + 15u, nb, ycb, b15, lanes_ok);
        }
    }
    if ROW_GROUPS > 2u {
        put4(m0 + 16u, na, yca, a16, lanes_ok);
        put4(m0 + 17u, na, yca, a17, lanes_ok);
        put4(m0 + 18u, na, yca, a18, lanes_ok);
        put4(m0 + 19u, na, yca, a19, lanes_ok);
        put4(m0 + 20u, na, yca, a20, lanes_ok);
        put4(m0 + 21u, na, yca, a21, lanes_ok);
        put4(m0 + 22u, na, yca, a22, lanes_ok);
        put4(m0 + 23u, na, yca, a23, lanes_ok);
        if COL_SETS > 1u {
            put4(m0 + 16u, nb, ycb, b16, lanes_ok);
            put4(m0 + 17u, nb, ycb, b17, lanes_ok);
            put4(m0 + 18u, nb, ycb, b18, lanes_ok);
            put4(m0 + 19u, nb, ycb, b19, lanes_ok);
            put4(m0 + 20u, nb, ycb, b20, lanes_ok);
            put4(m0 + 21u, nb, ycb, b21, lanes_ok);
            put4(m0 + 22u, nb, ycb, b22, lanes_ok);
            put4(m0 + 23u, nb, ycb, b23, lanes_ok);
        }
    }
    if ROW_GROUPS > 3u {
        put4(m0 + 24u, na, yca, a24, lanes_ok);
        put4(m0 + 25u, na, yca, a25, lanes_ok);
        put4(m0 + 26u, na, yca, a26, lanes_ok);
        put4(m0 + 27u, na, yca, a27, lanes_ok);
        put4(m0 + 28u, na, yca, a28, lanes_ok);
        put4(m0 + 29u, na, yca, a29, lanes_ok);
        put4(m0 + 30u, na, yca, a30, lanes_ok);
        put4(m0 + 31u, na, yca, a31, lanes_ok);
        if COL_SETS > 1u {
            put4(m0 + 24u, nb, ycb, b24, lanes_ok);
            put4(m0 + 25u, nb, ycb, b25, lanes_ok);
            put4(m0 + 26u, nb, ycb, b26, lanes_ok);
            put4(m0 + 27u, nb, ycb, b27, lanes_ok);
            put4(m0 + 28u, nb, ycb, b28, lanes_ok);
            put4(m0 + 29u, nb, ycb, b29, lanes_ok);
            put4(m0 + 30u, nb, ycb, b30, lanes_ok);
            put4(m0 + 31u, nb, ycb, b31, lanes_ok);
        }
    }
}
