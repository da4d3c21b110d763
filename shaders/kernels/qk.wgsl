// Scores = scale * Q·Kᵀ for one chunk, through workgroup-memory tiles.
// Writes the chunk-local score matrix (bh_count, row_count, Lk); the softmax kernel
// masks and normalises it in place.
//
// Each workgroup owns a TILE x TILE block of scores; each of its 16x16 invocations
// accumulates 2x2 of them, reading Q and K tiles of DEPTH columns from workgroup memory.

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;

const TILE: u32 = 32u;
const DEPTH: u32 = 16u;
const THREADS: u32 = 256u;

var<workgroup> q_tile: array<f32, 512>; // TILE rows x DEPTH
var<workgroup> k_tile: array<f32, 512>; // TILE keys x DEPTH

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let tiles_j = (params.len_k + TILE - 1u) / TILE;
    let tiles_i = (params.row_count + TILE - 1u) / TILE;
    let linear = linear_workgroup(wid, nwg);
    // Past the last tile of a flattened grid; uniform across the workgroup.
    if linear >= tiles_j * tiles_i * params.bh_count {
        return;
    }
    let tj = linear % tiles_j;
    let ti = (linear / tiles_j) % tiles_i;
    let lbh = linear / (tiles_j * tiles_i);
    let bh = params.bh_start + lbh;
    let kv = kv_head_of(bh);
    let row0 = ti * TILE;
    let key0 = tj * TILE;

    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var d0 = 0u; d0 < params.dim; d0 += DEPTH) {
        for (var e = li; e < TILE * DEPTH; e += THREADS) {
            let r = e / DEPTH;
            let c = d0 + e % DEPTH;
            let lrow = row0 + r;
            let key = key0 + r;
            // Rows past the chunk, keys past Lk and columns past D load as zero.
            var qv = 0.0;
            if lrow < params.row_count && c < params.dim {
                let i = params.row_start + lrow;
                qv = q[(bh * params.len_q + i) * params.dim + c - params.q_base];
            }
            var kvv = 0.0;
            if key < params.len_k && c < params.dim {
                kvv = k[(kv * params.len_k + key) * params.dim + c - params.k_base];
            }
            q_tile[e] = qv;
            k_tile[e] = kvv;
        }
        workgroupBarrier();
        for (var c = 0u; c < DEPTH; c++) {
            let a0 = q_tile[lid.y * DEPTH + c];
            let a1 = q_tile[(lid.y + 16u) * DEPTH + c];
            let b0 = k_tile[lid.x * DEPTH + c];
            let b1 = k_tile[(lid.x + 16u) * DEPTH + c];
            acc[0] = fma(a0, b0, acc[0]);
            acc[1] = fma(a0, b1, acc[1]);
            acc[2] = fma(a1, b0, acc[2]);
            acc[3] = fma(a1, b1, acc[3]);
        }
        workgroupBarrier();
    }
    for (var t = 0u; t < 4u; t++) {
        let lrow = row0 + lid.y + (t / 2u) * 16u;
        let key = key0 + lid.x + (t % 2u) * 16u;
        // Edge tiles: only rows of this chunk and keys below Lk exist.
        if lrow < params.row_count && key < params.len_k {
            scores[(lbh * params.row_count + lrow) * params.len_k + key] = params.scale * acc[t];
        }
    }
}
