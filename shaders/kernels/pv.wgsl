// Out = weights · V for one chunk, through workgroup-memory tiles.
// Each workgroup owns a TILE x TILE block of the output (rows x value columns); each of
// its 16x16 invocations accumulates 2x2 of them over DEPTH keys at a time.
// A weight of exactly 0 contributes nothing, so masked keys never bring in a NaN of V.

@group(0) @binding(1) var<storage, read> weights: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const TILE: u32 = 32u;
const DEPTH: u32 = 16u;
const THREADS: u32 = 256u;

var<workgroup> w_tile: array<f32, 512>; // TILE rows x DEPTH keys
var<workgroup> v_tile: array<f32, 512>; // DEPTH keys x TILE columns

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tiles_e = (params.dim_v + TILE - 1u) / TILE;
    let tiles_i = (params.row_count + TILE - 1u) / TILE;
    let linear = linear_workgroup(wid, nwg);
    // Past the last tile of a flattened grid; uniform across the workgroup.
    if linear >= tiles_e * tiles_i * params.bh_count {
        return;
    }
    let te = linear % tiles_e;
    let ti = (linear / tiles_e) % tiles_i;
    let lbh = linear / (tiles_e * tiles_i);
    let bh = params.bh_start + lbh;
    let kv = kv_head_of(bh);
    let row0 = ti * TILE;
    let col0 = te * TILE;

    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j0 = 0u; j0 < params.len_k; j0 += DEPTH) {
        for (var e = li; e < TILE * DEPTH; e += THREADS) {
            // w_tile is row-major (row, key); v_tile is (key, column).
            let r = e / DEPTH;
            let key = j0 + e % DEPTH;
            var wv = 0.0;
            // Rows past the chunk and keys past Lk load as zero.
            if row0 + r < params.row_count && key < params.len_k {
                wv = weights[((lbh * params.row_count) + row0 + r) * params.len_k + key];
            }
            w_tile[e] = wv;
            let vk = j0 + e / TILE;
            let col = col0 + e % TILE;
            var vv = 0.0;
            // Keys past Lk and columns past Dv load as zero.
            if vk < params.len_k && col < params.dim_v {
                vv = v[(kv * params.len_k + vk) * params.dim_v + col - params.v_base];
            }
            v_tile[e] = vv;
        }
        workgroupBarrier();
        for (var c = 0u; c < DEPTH; c++) {
            let a0 = w_tile[lid.y * DEPTH + c];
            let a1 = w_tile[(lid.y + 16u) * DEPTH + c];
            let b0 = v_tile[c * TILE + lid.x];
            let b1 = v_tile[c * TILE + lid.x + 16u];
            acc[0] += select(a0 * b0, 0.0, a0 == 0.0);
            acc[1] += select(a0 * b1, 0.0, a0 == 0.0);
            acc[2] += select(a1 * b0, 0.0, a1 == 0.0);
            acc[3] += select(a1 * b1, 0.0, a1 == 0.0);
        }
        workgroupBarrier();
    }
    for (var t = 0u; t < 4u; t++) {
        let lrow = row0 + lid.y + (t / 2u) * 16u;
        let col = col0 + lid.x + (t % 2u) * 16u;
        // Edge tiles: only rows of this chunk and columns below Dv exist.
        if lrow < params.row_count && col < params.dim_v {
            let i = params.row_start + lrow;
            out[(bh * params.len_q + i) * params.dim_v + col - params.o_base] = acc[t];
        }
    }
}
