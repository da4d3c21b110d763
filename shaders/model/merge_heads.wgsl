// Attention's output (heads, rows, dim) of one sequence into the rows layout
// (rows, heads * dim) the next projection reads; only needed for passes over several
// tokens, since for one token the two layouts are the same bytes. One invocation per
// element.

// Must match `MergeHeadsParams` in src/model/ops/merge_heads.rs.
struct MergeHeads {
    rows: u32,
    heads: u32,
    dim: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: MergeHeads;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the elements there are.
    if (i >= p.rows * p.heads * p.dim) {
        return;
    }
    let d = i % p.dim;
    let h = (i / p.dim) % p.heads;
    let r = i / (p.dim * p.heads);
    dst[i] = src[(h * p.rows + r) * p.dim + d];
}
