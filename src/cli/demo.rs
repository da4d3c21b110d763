//! `wgpu-attention` with no arguments: causal multi-head attention at a realistic shape on
//! the default adapter, checked against the CPU reference, with both timings.

use super::io::stdout::out;
use std::time::{Duration, Instant};

use ndarray::Array4;
use wgpu_attention::{attention, attention_reference, AttentionOptions, GpuContext};

use super::exit::CliError;
use super::info::describe;
use super::progress::Progress;

/// (B, H, L, D): one sequence of 512 tokens, 8 heads of width 64 (a GPT-2-small layer).
const SHAPE: (usize, usize, usize, usize) = (1, 8, 512, 64);
const SEED: u64 = 42;
/// docs/DESIGN.md's f32 bound: every element within `ATOL + RTOL * |ref|`.
const ATOL: f32 = 2e-5;
const RTOL: f32 = 1e-4;

pub fn run(quiet: bool) -> Result<(), CliError> {
    let (b, h, l, d) = SHAPE;
    out!("wgpu-attention demo: causal attention, B={b} H={h} L={l} D={d}, seeded normal inputs (seed {SEED})");
    let ctx = GpuContext::new()?;
    out!("adapter: {}", describe(ctx.adapter_info()));

    let mut rng = Normal::new(SEED);
    let q = rng.array(SHAPE);
    let k = rng.array(SHAPE);
    let v = rng.array(SHAPE);
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };

    // The first call builds the pipelines; the second is the one worth timing.
    let progress = Progress::start(quiet, "first GPU call: building pipelines");
    let (_, first) = timed(|| attention(&ctx, q.view(), k.view(), v.view(), &opts))?;
    progress.step("timed GPU call");
    let (gpu, gpu_time) = timed(|| attention(&ctx, q.view(), k.view(), v.view(), &opts))?;
    progress.step("CPU reference (f64)");
    let (cpu, cpu_time) = timed(|| attention_reference(q.view(), k.view(), v.view(), &opts))?;
    drop(progress);

    let mut max_err = 0f32;
    let mut worst: Option<([usize; 4], f32, f32)> = None;
    for ((i, &g), &c) in gpu.out.indexed_iter().zip(cpu.out.iter()) {
        let err = (g - c).abs();
        // NaN fails this test too, since every comparison with NaN is false.
        let within = err <= ATOL + RTOL * c.abs();
        if !within && worst.is_none() {
            worst = Some(([i.0, i.1, i.2, i.3], g, c));
        }
        if err.is_nan() || err > max_err {
            max_err = err;
        }
    }
    out!("largest |out - cpu|: {max_err:.3e} (bound {ATOL:e} + {RTOL:e} * |cpu|)");
    out!(
        "GPU time: {} (wall clock: upload, kernels, readback; first call {} with pipeline builds)",
        ms(gpu_time),
        ms(first)
    );
    out!(
        "CPU time: {} (wall clock: the f64 reference, one thread)",
        ms(cpu_time)
    );
    if let Some((idx, g, c)) = worst {
        return Err(CliError::runtime(format!(
            "GPU result outside the bound at out{idx:?}: gpu {g}, cpu {c}"
        )));
    }
    out!("ok");
    Ok(())
}

fn timed<T>(f: impl FnOnce() -> wgpu_attention::Result<T>) -> Result<(T, Duration), CliError> {
    let start = Instant::now();
    let value = f()?;
    Ok((value, start.elapsed()))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// A seeded normal generator (Box-Muller over SplitMix64), so the demo needs no
/// random-number crate and prints the same numbers every run.
struct Normal(u64);

impl Normal {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn sample(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    fn array(&mut self, shape: (usize, usize, usize, usize)) -> Array4<f32> {
        Array4::from_shape_simple_fn(shape, || self.sample())
    }
}
