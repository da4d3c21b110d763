//! Cross-attention through the multi-head layer: queries from one sequence (a decoder's
//! tokens), keys and values from another (an encoder's), as in translation. The GPU result
//! is checked against the float64 CPU path, and each query's attention over the source is
//! printed.
//!
//!     cargo run --release --example cross_attention

use ndarray::{Array2, Array3};
use wgpu_attention::{
    mha, mha_cpu, GpuContext, HeadWeights, MhaGpuWeights, MhaOptions, MhaWeights, Projections,
};

fn main() -> Result<(), wgpu_attention::AttentionError> {
    // A layer of width E = 8 with 2 heads; the source sequence has width Ekv = 6, so the
    // key and value projections are (E, Ekv).
    let (e, ekv, heads) = (8, 6, 2);
    let target = ["le", "chat", "dort"];
    let source = ["the", "cat", "is", "sleeping"];
    let m = |rows: usize, cols: usize, seed: usize| {
        Array2::from_shape_fn((rows, cols), |(i, j)| {
            (((i * 31 + j * 17 + seed) % 23) as f32 - 11.0) / 23.0
        })
    };
    let weights = MhaWeights::new(
        Projections {
            q_weight: m(e, e, 1),
            q_bias: None,
            k_weight: m(e, ekv, 2),
            k_bias: None,
            v_weight: m(e, ekv, 3),
            v_bias: None,
            out_weight: m(e, e, 4),
            out_bias: None,
        },
        heads,
        None,
    )?;
    let x = Array3::from_shape_fn((1, target.len(), e), |(_, i, c)| {
        ((i * 5 + c) as f32 * 0.3).cos()
    });
    let kv = Array3::from_shape_fn((1, source.len(), ekv), |(_, j, c)| {
        ((j * 3 + c) as f32 * 0.7).sin()
    });

    let ctx = GpuContext::new()?;
    let opts = MhaOptions {
        weights: HeadWeights::Averaged,
        ..Default::default()
    };
    let gpu = mha(
        &ctx,
        &MhaGpuWeights::upload(&ctx, &weights)?,
        x.view(),
        Some(kv.view()),
        &opts,
    )?;
    let cpu = mha_cpu(&weights, x.view(), Some(kv.view()), &opts)?;
    let worst = gpu
        .y
        .iter()
        .zip(&cpu.y)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "y {:?}: largest difference from the float64 path {worst:.2e}",
        gpu.y.shape()
    );

    let w = gpu.weights.expect("asked for weights");
    println!("cross-attention weights (averaged over heads), queries from the target, keys from the source:");
    println!("{:>8} {}", "", source.map(|s| format!("{s:>9}")).join(""));
    for (i, word) in target.iter().enumerate() {
        let row: String = (0..source.len())
            .map(|j| format!("{:>9.3}", w[[0, i, j]]))
            .collect();
        println!("{word:>8} {row}");
    }
    assert!(worst < 1e-4);
    Ok(())
}
