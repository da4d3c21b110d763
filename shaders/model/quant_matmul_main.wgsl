// The entry point of quant_matmul.wgsl for adapters without subgroup operations (and
// for kernels whose weight type the subgroup entry does not stage): every invocation
// reads x itself.

fn block4(o: vec4<u32>, k0: u32) {
    decode_block4(o, k0);
}

// An invocation with nothing to store leaves at once.
fn idle(past_the_end: bool) -> bool {
    return past_the_end;
}

fn row_ss(r: u32) -> f32 {
    return ss[r];
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    product(wid.x + wid.y * nwg.x, lid);
}
