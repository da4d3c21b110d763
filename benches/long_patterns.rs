//! Patterns of a long causal context without its weights matrix: at L = 32,768, H = 8,
//! D = 64 (the default), a 512 × 512 pooled map of head 0 and the entropy of every head
//! in one `attention_patterns` call; the device memory it used beyond inputs and outputs;
//! the pooled map against the float64 reference (all of it) and the entropy against it on
//! sampled rows; and the same call asking `attention` for the full weights, refused.
//!
//! `cargo bench --bench long_patterns [-- --len L]`

use std::time::Instant;

use ndarray::{s, Array4};
use wgpu_attention::{
    attention, attention_patterns, patterns_reference, AttentionOptions, GpuContext, PatternOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let len = args
        .iter()
        .position(|a| a == "--len")
        .and_then(|n| args.get(n + 1))
        .map_or(Ok(32_768), |s| s.parse::<usize>())?;
    let (h, d, pool) = (8, 64, 512);
    let ctx = GpuContext::new()?;
    println!("adapter: {}", ctx.adapter_info().name);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut normal = || {
        // xorshift, then a sum of uniforms: cheap, seeded, roughly normal.
        let mut u = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32
        };
        (u() + u() + u() + u() - 2.0) * 1.7
    };
    let q = Array4::from_shape_simple_fn((1, h, len, d), &mut normal);
    let k = Array4::from_shape_simple_fn((1, h, len, d), &mut normal);
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let ask = PatternOptions {
        heads: Some(&[0]),
        pool: Some(pool),
        entropy: true,
        ..Default::default()
    };

    let t = Instant::now();
    let got = attention_patterns(&ctx, q.view(), k.view(), &opts, &ask)?;
    let gpu_s = t.elapsed().as_secs_f64();
    println!(
        "L {len}, H {h}, D {d}, causal: pooled {pool}x{pool} of head 0 + entropy of {h} heads in {gpu_s:.1} s; \
         device memory beyond inputs and outputs: {} bytes ({:.2} MiB)",
        got.scratch_bytes,
        got.scratch_bytes as f64 / (1 << 20) as f64
    );

    let t = Instant::now();
    let want_ask = PatternOptions {
        entropy: false,
        ..ask.clone()
    };
    let want = patterns_reference(q.view(), k.view(), &opts, &want_ask)?;
    println!(
        "float64 reference of the pooled map: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (g, w) = (
        got.pooled.as_ref().ok_or("no pooled map")?,
        want.pooled.as_ref().ok_or("no reference map")?,
    );
    let bound = |x: f32| 2e-5 + 1e-4 * x.abs();
    let worst = |a: &Array4<f32>, b: &Array4<f32>| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (x - y).abs() / bound(y))
            .fold(0f32, f32::max)
    };
    let (wmax, wmean) = (worst(&g.max, &w.max), worst(&g.mean, &w.mean));
    println!("pooled map, worst error / bound (2e-5 + 1e-4·|ref|): max {wmax:.4}, mean {wmean:.4}");

    let entropy = got.entropy.as_ref().ok_or("no entropy")?;
    let mut went = 0f32;
    for i in (0..len).step_by((len / 64).max(1)).chain([len - 1]) {
        let one = PatternOptions {
            rows: Some(i..i + 1),
            entropy: true,
            ..Default::default()
        };
        let r = patterns_reference(q.view(), k.view(), &opts, &one)?;
        let e = r.entropy.ok_or("no reference entropy")?;
        for head in 0..h {
            let (x, y) = (entropy[[0, head, i]], e[[0, head, 0]]);
            went = went.max((x - y).abs() / bound(y));
        }
    }
    println!("entropy on 65 sampled rows of every head, worst error / bound: {went:.4}");

    let v = q.slice(s![.., .., .., ..]).to_owned();
    let full = AttentionOptions {
        return_weights: true,
        ..opts.clone()
    };
    match attention(&ctx, q.view(), k.view(), v.view(), &full) {
        Err(e) => println!("full weights refused: {e}"),
        Ok(_) => println!("full weights were NOT refused"),
    }
    let ok = wmax <= 1.0 && wmean <= 1.0 && went <= 1.0 && got.scratch_bytes <= 64 << 20;
    println!("{}", if ok { "PASS" } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
