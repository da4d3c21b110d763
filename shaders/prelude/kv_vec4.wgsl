// K and V for decode.wgsl, read four elements at a time. Only for D and Dv multiples of
// 4, with binding windows starting on a multiple of 4 elements (the launcher checks).

@group(0) @binding(2) var<storage, read> k: array<vec4<elem>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<elem>>;

// Columns 4 * c4 .. 4 * c4 + 3 of the K row of logical key `key` (flattened over K/V
// heads); columns past D read as zeros.
fn load_k4(key: u32, c4: u32) -> vec4<f32> {
    let n4 = params.dim / 4u;
    if c4 >= n4 {
        return vec4(0.0);
    }
    return vec4<f32>(k[key * n4 - params.k_base / 4u + c4]);
}

// As load_k4, for V and Dv.
fn load_v4(key: u32, c4: u32) -> vec4<f32> {
    let n4 = params.dim_v / 4u;
    if c4 >= n4 {
        return vec4(0.0);
    }
    return vec4<f32>(v[key * n4 - params.v_base / 4u + c4]);
}
