// Token embeddings: row l of the output is word[ids[l]] + position[l] + token_type[0]
// (every token has type 0: one segment). One invocation per output element.

// Must match `EmbedParams` in src/model/ops/embed.rs.
struct Embed {
    rows: u32,
    hidden: u32,
    vocab: u32,
    // Position of row 0 (0 for a whole sequence).
    first_position: u32,
}

@group(0) @binding(0) var<uniform> params: Embed;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> word: array<f32>;
@group(0) @binding(3) var<storage, read> position: array<f32>;
@group(0) @binding(4) var<storage, read> token_type: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid.x;
    // Invocations past the last element (the last workgroup's tail) write nothing.
    if i >= params.rows * params.hidden {
        return;
    }
    let l = i / params.hidden;
    let c = i % params.hidden;
    let id = ids[l];
    // The host rejects ids outside the vocabulary; a stray one gives NaN, not a wild read.
    if id >= params.vocab {
        out[i] = bitcast<f32>(0x7fc00000u);
        return;
    }
    out[i] = word[id * params.hidden + c]
        + position[(params.first_position + l) * params.hidden + c]
        + token_type[c];
}
