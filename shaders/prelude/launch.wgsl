// Shared by fused.wgsl, decode.wgsl and combine.wgsl: how a launch is cut into K/V
// heads, row tiles and key ranges.

// The key ranges of one launch and where their partials go for combine.wgsl. Must match
// `SplitParams` in src/gpu/kernels/fused.rs.
struct Split {
    // Key ranges per K/V head, and keys per range (a multiple of the kernel's tile).
    splits: u32,
    split_len: u32,
    // First key of range 0 (a multiple of the tile), and the end of the last range.
    key_lo: u32,
    key_hi: u32,
    // Flattened K/V heads of the chunk: kv_first .. kv_first + kv_count.
    kv_first: u32,
    kv_count: u32,
    // Row tiles per K/V head.
    row_tiles: u32,
    // Index in the partials where the (m, l) pairs start; outputs (rows, splits, Dv)
    // come first.
    ml_base: u32,
}

// A workgroup serves the query heads that read one K/V head, their rows packed
// position-major: virtual row t is position t / nh of head t % nh among the nh heads
// from heads_lo. Grouped-query heads thus share each K and V row loaded.
struct Row {
    // Flattened query head.
    bh: u32,
    // Row within the chunk.
    lrow: u32,
}

fn row_of(t: u32, heads_lo: u32, nh: u32) -> Row {
    return Row(heads_lo + t % nh, t / nh);
}
