// x and W for the dense-layer kernels, read four elements at a time: only where the
// head width of x and K are multiples of 4 (the launcher checks), so that four
// consecutive columns of a head never cross into the next one and every read is aligned.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<elem>>;

// Elements e .. e + 3 of x (e a multiple of 4; all four inside the head here).
fn load_x4(e: u32, left: u32) -> vec4<f32> {
    return x[e / 4u];
}

// Elements e .. e + 3 of W, as f32.
fn load_w4(e: u32, left: u32) -> vec4<f32> {
    return vec4<f32>(w[e / 4u]);
}
