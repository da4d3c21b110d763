//! Attention in five lines: ndarray in, ndarray out, checked against the CPU reference.
//!
//!     cargo run --release --example quickstart

use ndarray::Array4;
use wgpu_attention::{attention, attention_cpu, AttentionOptions, GpuContext};

fn main() -> Result<(), wgpu_attention::AttentionError> {
    // q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D): two query heads share one key/value head.
    let (b, hq, hkv, l, d) = (1, 2, 1, 6, 8);
    let wave = |n: usize, s: f32| ((n as f32) * s).sin();
    let q = Array4::from_shape_fn((b, hq, l, d), |(_, h, i, c)| {
        wave(h * 97 + i * 13 + c, 0.37)
    });
    let k = Array4::from_shape_fn((b, hkv, l, d), |(_, _, j, c)| wave(j * 11 + c, 0.53));
    let v = Array4::from_shape_fn((b, hkv, l, d), |(_, _, j, c)| wave(j * 7 + c * 3, 0.29));

    let ctx = GpuContext::new()?;
    let opts = AttentionOptions {
        causal: true,
        return_weights: true,
        ..Default::default()
    };
    let gpu = attention(&ctx, q.view(), k.view(), v.view(), &opts)?;
    let cpu = attention_cpu(q.view(), k.view(), v.view(), &opts)?;

    let worst = gpu
        .out
        .iter()
        .zip(&cpu.out)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("adapter: {}", ctx.adapter_info().name);
    println!(
        "out shape {:?}, largest difference from the CPU reference {worst:.2e}",
        gpu.out.shape()
    );
    let weights = gpu.weights.expect("asked for weights");
    println!("head 0's causal weights (rows sum to 1, the upper triangle is 0):");
    for row in weights.slice(ndarray::s![0, 0, .., ..]).outer_iter() {
        let cells: Vec<String> = row.iter().map(|w| format!("{w:.3}")).collect();
        println!("  {}", cells.join(" "));
    }
    assert!(worst < 1e-4, "the GPU disagrees with the reference");
    Ok(())
}
