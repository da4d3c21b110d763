// The masking rule, for kernels that bind `kv_lens` and `mask`.
// Must agree with src/reference.rs: structure (causal, window, key length), then the
// explicit mask (an additive -inf masks exactly like a boolean false); a final logit of
// -inf means "not allowed".

// Causal, window and key length for query row i, key j of flattened query head bh.
fn structurally_allowed(bh: u32, i: u32, j: u32) -> bool {
    let p = i32(i) + params.pos_offset;
    let jj = i32(j);
    var ok = jj >= p - params.win_left && jj <= p + params.win_right;
    if (params.flags & FLAG_CAUSAL) != 0u {
        ok = ok && jj <= p;
    }
    if (params.flags & FLAG_KV_LENS) != 0u {
        ok = ok && j < kv_lens[bh / params.heads_q];
    }
    return ok;
}

// The final logit from the scaled score: -inf where the pair is not allowed, plus the
// additive mask where there is one.
fn masked_logit(bh: u32, i: u32, j: u32, scaled: f32) -> f32 {
    if !structurally_allowed(bh, i, j) {
        return neg_inf();
    }
    if params.mask_kind == MASK_NONE {
        return scaled;
    }
    let b = bh / params.heads_q;
    let h = bh % params.heads_q;
    let logical = b * params.mask_stride_b + h * params.mask_stride_h
        + i * params.mask_stride_i + j * params.mask_stride_j;
    let idx = logical - params.mask_base;
    if params.mask_kind == MASK_BOOL {
        // One byte per element, four to a word.
        let byte = (mask[idx >> 2u] >> ((idx & 3u) * 8u)) & 0xffu;
        return select(neg_inf(), scaled, byte != 0u);
    }
    // An additive -inf masks like a boolean false, even where `scaled` is NaN or +inf.
    let bias = bitcast<f32>(mask[idx]);
    return select(scaled + bias, neg_inf(), is_neg_inf(bias));
}
