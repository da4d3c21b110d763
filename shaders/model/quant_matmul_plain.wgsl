// What quant_matmul.wgsl asks of its entry file, for the entries whose every invocation
// reads x itself (quant_matmul_main.wgsl, quant_matmul_split.wgsl): blocks decoded as
// they are, an invocation with nothing to store leaving at once, and each row's sum of
// squares its own (in the split entry, after the group's sums are added).

fn block4(o: vec4<u32>, k0: u32) {
    decode_block4(o, k0);
}

fn idle(past_the_end: bool) -> bool {
    return past_the_end;
}

fn row_ss(r: u32) -> f32 {
    return ss[r];
}
