//! A decoding loop with a KV cache on the GPU: each new token runs one step of the
//! multi-head layer against the keys and values cached so far, and the result equals the
//! full causal run over the whole sequence.
//!
//!     cargo run --release --example kv_cache_decoding

use ndarray::{s, Array2, Array3};
use wgpu_attention::{
    mha, mha_incremental, GpuContext, MhaGpuWeights, MhaOptions, MhaWeights, Projections,
};

fn main() -> Result<(), wgpu_attention::AttentionError> {
    let (e, heads, kv_heads, tokens) = (16, 4, 2, 12);
    let m = |seed: usize, rows: usize| {
        Array2::from_shape_fn((rows, e), |(i, j)| {
            (((i * 13 + j * 7 + seed) % 19) as f32 - 9.0) / 30.0
        })
    };
    // Grouped-query: 4 query heads over 2 key/value heads, so k and v project to 8 columns.
    let kv_rows = kv_heads * e / heads;
    let weights = MhaWeights::new(
        Projections {
            q_weight: m(1, e),
            q_bias: None,
            k_weight: m(2, kv_rows),
            k_bias: None,
            v_weight: m(3, kv_rows),
            v_bias: None,
            out_weight: m(4, e),
            out_bias: None,
        },
        heads,
        Some(kv_heads),
    )?;
    let x = Array3::from_shape_fn((1, tokens, e), |(_, t, c)| {
        ((t * 3 + c) as f32 * 0.21).sin()
    });

    let ctx = GpuContext::new()?;
    let gpu_weights = MhaGpuWeights::upload(&ctx, &weights)?;
    // One step per token through the cache...
    let stepped = mha_incremental(&ctx, &gpu_weights, x.view(), &MhaOptions::default())?;
    // ...against one causal pass over the whole sequence.
    let causal = MhaOptions {
        causal: true,
        ..Default::default()
    };
    let full = mha(&ctx, &gpu_weights, x.view(), None, &causal)?;

    for t in 0..tokens {
        let a = stepped.y.slice(s![0, t, ..]);
        let b = full.y.slice(s![0, t, ..]);
        let diff = a
            .iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        println!(
            "token {t:>2}: cache holds {:>2} keys, largest difference from the full run {diff:.2e}",
            t + 1
        );
        assert!(diff < 1e-4);
    }
    Ok(())
}
