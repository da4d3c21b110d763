// x and W for the dense-layer kernels, read one element at a time: any head width and
// any K.

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<elem>;

// Elements e .. e + 3 of x, of which the first `left` lie inside the current head; the
// others (past the head's last column) read as zeros.
fn load_x4(e: u32, left: u32) -> vec4<f32> {
    var v = vec4(x[e], 0.0, 0.0, 0.0);
    // Columns past the head's width: zeros.
    if left > 1u {
        v.y = x[e + 1u];
    }
    if left > 2u {
        v.z = x[e + 2u];
    }
    if left > 3u {
        v.w = x[e + 3u];
    }
    return v;
}

// As load_x4, for W, as f32.
fn load_w4(e: u32, left: u32) -> vec4<f32> {
    var v = vec4(f32(w[e]), 0.0, 0.0, 0.0);
    // Columns past the head's width: zeros (they would be the next head's, or past K).
    if left > 1u {
        v.y = f32(w[e + 1u]);
    }
    if left > 2u {
        v.z = f32(w[e + 2u]);
    }
    if left > 3u {
        v.w = f32(w[e + 3u]);
    }
    return v;
}
