// Embedding gather: row r of x is row ids[r] of the (vocab, hidden) table.
// One invocation per element of x.

// Must match `EmbedParams` in src/model/llama/gpu/kernels.rs.
struct Embed {
    rows: u32,
    hidden: u32,
    vocab: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Embed;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the rows x holds.
    if (i >= p.rows * p.hidden) {
        return;
    }
    let r = i / p.hidden;
    let id = ids[r];
    // An id outside the table (the host rejects these first) reads nothing.
    if (id >= p.vocab) {
        x[i] = 0.0;
        return;
    }
    x[i] = table[id * p.hidden + i % p.hidden];
}
