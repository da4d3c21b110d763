//! The shape ladder: prefill (B = 1, H = 8, D = 64 at L = 128, 512, 2048, causal and not)
//! and decoding (Lq = 1 against Lk = 4096 and 32768, 32 query heads over 8 K/V heads),
//! on the fast CPU path (`cpu_`, f32 flash attention on every core), the float64
//! reference (`reference_`), the three-kernel path (`gpu_staged_`), the fused kernel
//! (`gpu_fused_`) and split-KV decoding (`gpu_decode_`).
//!
//! Every path is checked against the reference (on the first query head, to keep the
//! check quick) before it is timed. GPU timing submits many calls and waits once, so no
//! iteration blocks on the device. The reference (f64 loops, one thread) is timed only
//! where it takes under a second or so a call: the L = 128 prefill and the Lk = 4096
//! decode. `benches/jax_cpu.py` times JAX's XLA CPU on the same shapes.
//!
//! `cargo bench --bench attention`; `WGPU_ADAPTER_NAME` picks the adapter.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ndarray::{s, Array4};
use wgpu_attention::*;

struct Shape {
    name: &'static str,
    heads_q: usize,
    heads_kv: usize,
    len_q: usize,
    len_k: usize,
    causal: bool,
    /// The float64 reference is timed too.
    reference: bool,
    /// The decode kernel is timed too.
    decode: bool,
}

const D: usize = 64;

const fn prefill(name: &'static str, len: usize, causal: bool) -> Shape {
    Shape {
        name,
        heads_q: 8,
        heads_kv: 8,
        len_q: len,
        len_k: len,
        causal,
        reference: len <= 128,
        decode: false,
    }
}

const fn decoding(name: &'static str, len_k: usize) -> Shape {
    Shape {
        name,
        heads_q: 32,
        heads_kv: 8,
        len_q: 1,
        len_k,
        causal: false,
        reference: len_k <= 4096,
        decode: true,
    }
}

const SHAPES: &[Shape] = &[
    prefill("prefill_L128", 128, false),
    prefill("prefill_L128_causal", 128, true),
    prefill("prefill_L512", 512, false),
    prefill("prefill_L512_causal", 512, true),
    prefill("prefill_L2048", 2048, false),
    prefill("prefill_L2048_causal", 2048, true),
    decoding("decode_Lk4096", 4096),
    decoding("decode_Lk32768", 32768),
];

fn data(shape: (usize, usize, usize, usize), seed: u64) -> Array4<f32> {
    let mut state = seed;
    Array4::from_shape_simple_fn(shape, || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}

fn wait(ctx: &GpuContext) {
    ctx.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("device wait");
}

/// Checks `got` (a path's output on q, k, v) against the reference on query head 0.
fn validate_output(
    got: &AttentionOutput,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
    what: &str,
) {
    let gpu = got;
    let (q0, k0, v0) = (
        q.slice(s![.., 0..1, .., ..]),
        k.slice(s![.., 0..1, .., ..]),
        v.slice(s![.., 0..1, .., ..]),
    );
    let cpu = attention_reference(q0, k0, v0, opts).expect("reference");
    let got = gpu.out.slice(s![.., 0..1, .., ..]);
    for (g, w) in got.iter().zip(cpu.out.iter()) {
        assert!(
            (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
            "{what}: {g} differs from the reference {w}"
        );
    }
}

fn bench_shapes(c: &mut Criterion) {
    let ctx = GpuContext::new().expect("no GPU adapter");
    ctx.set_autotune(true);
    for shape in SHAPES {
        let q = data((1, shape.heads_q, shape.len_q, D), 1);
        let k = data((1, shape.heads_kv, shape.len_k, D), 2);
        let v = data((1, shape.heads_kv, shape.len_k, D), 3);
        let mut group = c.benchmark_group(shape.name);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        let opts = |path| AttentionOptions {
            causal: shape.causal,
            path,
            ..Default::default()
        };
        let cpu_opts = opts(KernelPath::Auto);
        let fast = attention_cpu(q.view(), k.view(), v.view(), &cpu_opts).expect("fast cpu");
        validate_output(&fast, &q, &k, &v, &cpu_opts, &format!("{} cpu", shape.name));
        group.bench_function(format!("cpu_{}", shape.name), |b| {
            b.iter(|| attention_cpu(q.view(), k.view(), v.view(), &cpu_opts))
        });
        if shape.reference {
            group.bench_function(format!("reference_{}", shape.name), |b| {
                b.iter(|| attention_reference(q.view(), k.view(), v.view(), &cpu_opts))
            });
        }
        let up =
            |a: &Array4<f32>| GpuTensor::from_array(&ctx, a.view().into_dyn()).expect("upload");
        let (qt, kt, vt) = (up(&q), up(&k), up(&v));
        let mut paths = vec![
            ("gpu_staged", KernelPath::Staged),
            ("gpu_fused", KernelPath::Fused),
        ];
        if shape.decode {
            paths.push(("gpu_decode", KernelPath::Decode));
        }
        for (id, path) in paths {
            let o = opts(path);
            let what = format!("{} {id}", shape.name);
            let gpu = attention(&ctx, q.view(), k.view(), v.view(), &o).expect(&what);
            validate_output(&gpu, &q, &k, &v, &o, &what);
            let outputs =
                GpuOutputs::allocate(&ctx, q.shape(), k.shape(), v.shape(), &o).expect("outputs");
            group.bench_function(format!("{id}_{}", shape.name), |b| {
                b.iter_custom(|iters| {
                    let started = Instant::now();
                    for _ in 0..iters {
                        pollster::block_on(attention_gpu_into_async(
                            &ctx, &qt, &kt, &vt, &o, &outputs,
                        ))
                        .expect("gpu attention");
                    }
                    wait(&ctx);
                    started.elapsed()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_shapes);
criterion_main!(benches);
