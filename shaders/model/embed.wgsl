// Token embeddings: row l of the output is word[ids[l]] + position[l % per_sequence] +
// token_type[0] (every token has type 0: one segment). Rows hold a batch of sequences of
// per_sequence rows each, so every sequence starts at position 0. One invocation per
// output element.

// Must match `EmbedParams` in src/model/ops/embed.rs.
struct Embed {
    rows: u32,
    hidden: u32,
    vocab: u32,
    // Rows of each sequence of the batch (all of them for one sequence); at least 1.
    per_sequence: u32,
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
    // The host rejects ids outside the vocabulary; a stray one reads no table out of
    // bounds (its row is left as the buffer held it).
    if id >= params.vocab {
        return;
    }
    out[i] = word[id * params.hidden + c]
        + position[(l % params.per_sequence) * params.hidden + c]
        + token_type[c];
}
