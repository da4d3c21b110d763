//! Measuring one attention shape: median kernel time, GFLOP/s by the exact count of
//! allowed pairs, device memory beyond inputs and outputs, and transfers apart. Used by
//! `wgpu-attention bench`; the criterion benches in `benches/` time the public API.
//!
//! GPU time comes from timestamp queries around the recorded kernels where the adapter
//! has `TIMESTAMP_QUERY` ([`Timing::Timestamp`]); elsewhere it is the wall time from
//! submission to completion ([`Timing::Wall`]), which includes launch overhead.

use std::time::Instant;

use ndarray::{Array4, Ix4};

use crate::api::GpuOutputs;
use crate::checked_call::CheckedCall;
use crate::cpu::attention_cpu;
use crate::error::{AttentionError, Result};
use crate::gpu::call::{Call, CallInputs};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::f16_tensor as f16;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::device::timer::Timer;
use crate::gpu::forward::io::ForwardOutputs;
use crate::gpu::kernels::elem::Elem;
use crate::host_memory::{bytes_of, check_host_bytes, elements, try_zeros};
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::problem::{validate, Problem};

/// The most timed runs one measurement takes: a median needs far fewer, and each run's
/// sample is kept.
pub const MAX_ITERS: usize = 100_000;

/// One shape to measure, with the options the command line offers.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub len_q: usize,
    pub len_k: usize,
    pub dim: usize,
    pub dim_v: usize,
    pub causal: bool,
    /// GPU kernel path; [`KernelPath::Auto`] reports the path it chose.
    pub path: KernelPath,
    pub precision: Precision,
    /// Timed runs after one untimed warm-up (which compiles and tunes).
    pub iters: usize,
}

impl BenchConfig {
    /// Multi-head attention of `(B, H, Lq, Lk, D)` with `Hkv = H`, `Dv = D`, defaults
    /// elsewhere (not causal, automatic path, f32, 10 iterations).
    pub fn new(batch: usize, heads: usize, len_q: usize, len_k: usize, dim: usize) -> Self {
        Self {
            batch,
            heads_q: heads,
            heads_kv: heads,
            len_q,
            len_k,
            dim,
            dim_v: dim,
            causal: false,
            path: KernelPath::Auto,
            precision: Precision::F32,
            iters: 10,
        }
    }

    fn options(&self) -> AttentionOptions<'static> {
        AttentionOptions {
            causal: self.causal,
            path: self.path,
            precision: self.precision,
            ..Default::default()
        }
    }

    /// The shapes of q, k and v.
    fn shapes(&self) -> [[usize; 4]; 3] {
        [
            [self.batch, self.heads_q, self.len_q, self.dim],
            [self.batch, self.heads_kv, self.len_k, self.dim],
            [self.batch, self.heads_kv, self.len_k, self.dim_v],
        ]
    }

    fn check_iters(&self) -> Result<()> {
        if !(1..=MAX_ITERS).contains(&self.iters) {
            return Err(AttentionError::option(
                "iters",
                format!("must be between 1 and {MAX_ITERS}, got {}", self.iters),
            ));
        }
        Ok(())
    }

    fn problem(&self) -> Result<Problem> {
        self.check_iters()?;
        let [q, k, v] = self.shapes();
        validate(&q, &k, &v, &self.options())
    }

    /// Bytes any implementation must move at least: q, k and v read once in their storage
    /// precision, the f32 output written once. Divided by the time, the bandwidth a call
    /// reaches, the measure for decoding, which is bound by reading K and V.
    pub fn min_bytes(&self) -> Result<f64> {
        let p = self.problem()?;
        let elem = match self.precision {
            Precision::F32 => 4.0,
            Precision::F16 => 2.0,
        };
        let (b, hq, hkv) = (p.batch as f64, p.heads_q as f64, p.heads_kv as f64);
        let (lq, lk, d, dv) = (p.len_q as f64, p.len_k as f64, p.dim as f64, p.dim_v as f64);
        let inputs = b * (hq * lq * d + hkv * lk * (d + dv));
        Ok(inputs * elem + b * hq * lq * dv * 4.0)
    }

    /// Floating-point operations of one call: `2 * B * Hq * (D + Dv)` per allowed pair.
    pub fn flops(&self) -> Result<f64> {
        let p = self.problem()?;
        let pairs = p.allowed_pairs_per_head() as f64 * p.batch as f64 * p.heads_q as f64;
        Ok(2.0 * pairs * (p.dim + p.dim_v) as f64)
    }
}

/// Where a time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Device timestamps around the kernels.
    Timestamp,
    /// Host wall clock from submission to completion.
    Wall,
}

/// The measurement of one (backend, path).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    pub config: BenchConfig,
    /// `"gpu"` or `"cpu"`.
    pub backend: &'static str,
    /// `"staged"`, `"fused"`, `"decode"` or `"cpu"`.
    pub path: &'static str,
    pub median_ms: f64,
    pub min_ms: f64,
    pub gflops: f64,
    /// GB/s of [`BenchConfig::min_bytes`].
    pub gbps: f64,
    /// Device bytes the call allocates beyond its inputs and outputs (score scratch,
    /// partials, f16 copies, parameters); 0 on the CPU.
    pub peak_device_bytes: u64,
    pub timing: Timing,
    pub adapter: String,
    /// Host to device copy of q, k and v, once; 0 on the CPU.
    pub upload_ms: f64,
    /// Device to host copy of the output, once; 0 on the CPU.
    pub download_ms: f64,
}

impl BenchResult {
    /// One JSON object on one line, with the keys docs/DESIGN.md lists.
    pub fn to_json(&self) -> String {
        let c = &self.config;
        let precision = match c.precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        };
        let timing = match self.timing {
            Timing::Timestamp => "timestamp",
            Timing::Wall => "wall",
        };
        format!(
            concat!(
                "{{\"backend\": \"{}\", \"path\": \"{}\", \"precision\": \"{}\", ",
                "\"shape\": [{}, {}, {}, {}, {}], \"hkv\": {}, \"dv\": {}, \"causal\": {}, ",
                "\"median_ms\": {}, \"min_ms\": {}, \"gflops\": {}, \"gbps\": {}, ",
                "\"peak_device_bytes\": {}, ",
                "\"timing\": \"{}\", \"adapter\": {}, \"upload_ms\": {}, \"download_ms\": {}, ",
                "\"iters\": {}}}"
            ),
            self.backend,
            self.path,
            precision,
            c.batch,
            c.heads_q,
            c.len_q,
            c.len_k,
            c.dim,
            c.heads_kv,
            c.dim_v,
            c.causal,
            json_number(self.median_ms),
            json_number(self.min_ms),
            json_number(self.gflops),
            json_number(self.gbps),
            self.peak_device_bytes,
            timing,
            json_string(&self.adapter),
            json_number(self.upload_ms),
            json_number(self.download_ms),
            c.iters,
        )
    }
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6}")
    } else {
        "null".into()
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Seeded normal inputs (SplitMix64 and Box-Muller), so every run sees the same data.
/// Allocated fallibly after the sizes were checked, so a shape this machine cannot hold
/// is an error, not an abort.
fn inputs(c: &BenchConfig) -> Result<(Array4<f32>, Array4<f32>, Array4<f32>)> {
    let mut state = 0x5eed_u64;
    let mut uniform = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut normal = move || {
        let (u1, u2) = (uniform().max(1e-300), uniform());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    };
    let [q, k, v] = c.shapes();
    let shapes = [("q", q), ("k", k), ("v", v)];
    let total = shapes.iter().try_fold(0u64, |n, (arg, s)| {
        Ok::<_, AttentionError>(n.saturating_add(bytes_of::<f32>(elements(arg, s)?)))
    })?;
    check_host_bytes("q", "the random q, k and v", total)?;
    let mut make = |arg, s: [usize; 4]| -> Result<Array4<f32>> {
        let mut a = try_zeros::<f32, _>(arg, Ix4(s[0], s[1], s[2], s[3]))?;
        a.iter_mut().for_each(|x| *x = normal());
        Ok(a)
    };
    let [(qa, qs), (ka, ks), (va, vs)] = shapes;
    Ok((make(qa, qs)?, make(ka, ks)?, make(va, vs)?))
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => samples[n / 2],
        _ => (samples[n / 2 - 1] + samples[n / 2]) / 2.0,
    }
}

fn path_name(path: KernelPath) -> &'static str {
    match path {
        KernelPath::Staged | KernelPath::Auto => "staged",
        KernelPath::Fused => "fused",
        KernelPath::Decode => "decode",
    }
}

/// Measures `config` on the GPU: uploads once, one warm-up call, then `iters` timed
/// calls, each its own submission.
///
/// # Errors
/// Input errors of the shape and options, [`AttentionError::Unsupported`] for f16 on an
/// adapter without it, and device errors.
pub async fn bench_gpu_async(ctx: &GpuContext, config: &BenchConfig) -> Result<BenchResult> {
    let opts = config.options();
    config.check_iters()?;
    let [qs, ks, vs] = config.shapes();
    // Every size against the device before the inputs are even made.
    let checked = CheckedCall::new(ctx, (&qs, &ks, &vs), &opts)?;
    let path = checked.path();
    let (q, k, v) = inputs(config)?;
    let started = Instant::now();
    let named = [("q", &q), ("k", &k), ("v", &v)];
    let elem = checked.elem();
    let tensors: Vec<wgpu::Buffer> = match elem {
        Elem::F32 => named
            .iter()
            .map(|(arg, a)| {
                Ok(GpuTensor::upload(ctx, arg, a.view().into_dyn())?
                    .buffer()
                    .clone())
            })
            .collect::<Result<_>>()?,
        Elem::F16 => named
            .iter()
            .map(|(arg, a)| f16::upload(ctx, arg, a.view().into_dyn()))
            .collect::<Result<_>>()?,
    };
    ctx.queue.submit([]);
    ctx.wait_for_device()?;
    let upload_ms = started.elapsed().as_secs_f64() * 1e3;
    let call = CallInputs {
        q: &tensors[0],
        k: &tensors[1],
        v: &tensors[2],
        elem,
    };
    let outputs = GpuOutputs::for_problem(ctx, &checked.problem)?;
    let call = Call::prepare(ctx, checked.problem, &checked.chosen, call, checked.data).await?;
    let written = ForwardOutputs::of(&outputs, call.problem());
    let timer = Timer::new(ctx)?;
    let mut samples = Vec::with_capacity(config.iters);
    let mut scratch = 0;
    for n in 0..=config.iters {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        if let Some(t) = &timer {
            t.start(&mut encoder);
        }
        scratch = call.record(ctx, &mut Recorder::new(&mut encoder), &written)?;
        if let Some(t) = &timer {
            t.stop(&mut encoder);
        }
        let submitted = Instant::now();
        ctx.queue.submit([encoder.finish()]);
        ctx.wait_for_device()?;
        let wall = submitted.elapsed().as_secs_f64() * 1e3;
        let ms = match &timer {
            Some(t) => t.read_ms(ctx).await?,
            None => wall,
        };
        // The first run warms up (compiling and tuning were done by `prepare`): not timed.
        if n > 0 {
            samples.push(ms);
        }
    }
    let started = Instant::now();
    outputs.out.read_async(ctx).await?;
    let download_ms = started.elapsed().as_secs_f64() * 1e3;
    let min_ms = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let median_ms = median(&mut samples);
    Ok(BenchResult {
        config: config.clone(),
        backend: "gpu",
        path: path_name(path),
        median_ms,
        min_ms,
        gflops: config.flops()? / (median_ms * 1e6),
        gbps: config.min_bytes()? / (median_ms * 1e6),
        peak_device_bytes: scratch,
        timing: if timer.is_some() {
            Timing::Timestamp
        } else {
            Timing::Wall
        },
        adapter: ctx.adapter_info().name.clone(),
        upload_ms,
        download_ms,
    })
}

/// Blocking form of [`bench_gpu_async`]. The context's tuning setting applies
/// ([`GpuContext::set_autotune`]); the warm-up call is where tuning happens.
///
/// # Errors
/// As [`bench_gpu_async`].
pub fn bench_gpu(ctx: &GpuContext, config: &BenchConfig) -> Result<BenchResult> {
    pollster::block_on(bench_gpu_async(ctx, config))
}

/// Measures the fast CPU path ([`attention_cpu`]) on `config`: wall time of `iters`
/// runs after one untimed call (which starts rayon's threads).
///
/// # Errors
/// Input errors of the shape and options.
pub fn bench_cpu(config: &BenchConfig) -> Result<BenchResult> {
    config.problem()?;
    let opts = AttentionOptions {
        causal: config.causal,
        ..Default::default()
    };
    let (q, k, v) = inputs(config)?;
    attention_cpu(q.view(), k.view(), v.view(), &opts)?;
    let mut samples = Vec::with_capacity(config.iters);
    for _ in 0..config.iters {
        let started = Instant::now();
        attention_cpu(q.view(), k.view(), v.view(), &opts)?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let min_ms = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let median_ms = median(&mut samples);
    Ok(BenchResult {
        config: config.clone(),
        backend: "cpu",
        path: "cpu",
        median_ms,
        min_ms,
        gflops: config.flops()? / (median_ms * 1e6),
        gbps: config.min_bytes()? / (median_ms * 1e6),
        peak_device_bytes: 0,
        timing: Timing::Wall,
        adapter: "cpu".into(),
        upload_ms: 0.0,
        download_ms: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_count_allowed_pairs() {
        let mut c = BenchConfig::new(2, 3, 4, 4, 8);
        assert_eq!(c.flops().unwrap(), 2.0 * 6.0 * 16.0 * 16.0);
        c.causal = true;
        assert_eq!(c.flops().unwrap(), 2.0 * 6.0 * 10.0 * 16.0);
    }

    #[test]
    fn json_has_the_design_keys() {
        let r = BenchResult {
            config: BenchConfig::new(1, 2, 3, 4, 5),
            backend: "gpu",
            path: "fused",
            median_ms: 1.5,
            min_ms: 1.0,
            gflops: 2.0,
            gbps: 3.0,
            peak_device_bytes: 7,
            timing: Timing::Wall,
            adapter: "a \"b\"".into(),
            upload_ms: 0.0,
            download_ms: 0.0,
        };
        let j = r.to_json();
        for key in [
            "\"backend\": \"gpu\"",
            "\"path\": \"fused\"",
            "\"precision\": \"f32\"",
            "\"shape\": [1, 2, 3, 4, 5]",
            "\"hkv\": 2",
            "\"dv\": 5",
            "\"causal\": false",
            "\"median_ms\": 1.5",
            "\"gflops\": 2.0",
            "\"gbps\": 3.0",
            "\"peak_device_bytes\": 7",
            "\"timing\": \"wall\"",
            "\"adapter\": \"a \\\"b\\\"\"",
        ] {
            assert!(j.contains(key), "{key} missing from {j}");
        }
    }
}
