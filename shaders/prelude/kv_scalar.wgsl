// K and V for fused.wgsl and decode.wgsl, read one element at a time: any D and Dv.

@group(0) @binding(2) var<storage, read> k: array<elem>;
@group(0) @binding(3) var<storage, read> v: array<elem>;

// Columns 4 * c4 .. 4 * c4 + 3 of the K row of logical key `key` (flattened over K/V
// heads); columns past D read as zeros.
fn load_k4(key: u32, c4: u32) -> vec4<f32> {
    let row = key * params.dim - params.k_base;
    var x = vec4(0.0);
    for (var c = 0u; c < 4u; c++) {
        let d = 4u * c4 + c;
        if d < params.dim {
            x[c] = f32(k[row + d]);
        }
    }
    return x;
}

// As load_k4, for V and Dv.
fn load_v4(key: u32, c4: u32) -> vec4<f32> {
    let row = key * params.dim_v - params.v_base;
    var x = vec4(0.0);
    for (var c = 0u; c < 4u; c++) {
        let e = 4u * c4 + c;
        if e < params.dim_v {
            x[c] = f32(v[row + e]);
        }
    }
    return x;
}
