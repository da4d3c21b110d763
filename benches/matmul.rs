//! The dense-layer kernels at the models' shapes: for each shape and each kernel shape
//! the adapter runs, the output is checked against a float64 reference first, then
//! `ITERS` launches are recorded into one encoder between one pair of waits on the
//! device, five times; the median gives GFLOP/s (2 M N K per launch). The time to build
//! each kernel (`build`) is printed too: run with `MESA_SHADER_CACHE_DISABLE=true` for
//! cold-cache compile times.
//!
//! `cargo bench --bench matmul`; `MATMUL_BENCH_ITERS` (default 20) launches per timing.

use std::time::Instant;

use ndarray::{Array1, Array2};
use wgpu_attention::{GpuContext, GpuTensor, LinearForTests, LinearTile};

/// (M, K, N): MiniLM's projections at 128 and 8 tokens (q/k/v and output 384 -> 384,
/// intermediate 384 -> 1536, output dense 1536 -> 384), and the same widths for one row
/// (a decoding step of `mha` with a KV cache).
const SHAPES: &[(usize, usize, usize)] = &[
    (128, 384, 384),
    (128, 384, 1536),
    (128, 1536, 384),
    (8, 384, 384),
    (8, 384, 1536),
    (8, 1536, 384),
    (1, 384, 384),
    (1, 384, 1536),
    (1, 1536, 384),
];

fn rng_fill(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn wait(ctx: &GpuContext) {
    ctx.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("device wait");
}

fn main() {
    let iters: usize = std::env::var("MATMUL_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let ctx = GpuContext::new().expect("no GPU adapter");
    let info = ctx.adapter_info();
    println!("adapter: {} ({})", info.name, info.driver_info);
    let mut tiles = vec![
        LinearTile::Auto,
        LinearTile::Tiled,
        LinearTile::Split { rows: 1 },
        LinearTile::Split { rows: 4 },
    ];
    for (row_groups, col_sets) in [(1, 1), (2, 1), (4, 1), (2, 2), (4, 2)] {
        tiles.push(LinearTile::Lanes {
            row_groups,
            col_sets,
        });
    }
    for &(m, k, n) in SHAPES {
        let x = Array2::from_shape_vec((m, k), rng_fill(m * k, 1)).unwrap();
        let w = Array2::from_shape_vec((n, k), rng_fill(n * k, 2)).unwrap();
        let b = Array1::from_vec(rng_fill(n, 3));
        let want = x.mapv(f64::from).dot(&w.t().mapv(f64::from)) + b.mapv(f64::from);
        let xt = GpuTensor::from_array(&ctx, x.view().into_dyn()).unwrap();
        let yt = GpuTensor::empty(&ctx, &[m, n]).unwrap();
        let (xl, yl) = (
            [m as u32, 1, k as u32, m as u32, 0],
            [m as u32, 1, n as u32, m as u32, 0],
        );
        for &tile in &tiles {
            let t = Instant::now();
            let layer = match pollster::block_on(LinearForTests::new(
                &ctx,
                tile,
                w.view(),
                b.view(),
                (false, false),
            )) {
                Ok(l) => l,
                Err(e) => {
                    println!("M {m} K {k} N {n} {tile:?}: not run ({e})");
                    continue;
                }
            };
            let build = t.elapsed().as_secs_f64();
            let record = |count: usize| {
                let mut enc = ctx.device().create_command_encoder(&Default::default());
                for _ in 0..count {
                    layer
                        .record(&ctx, &mut enc, (&xt, xl), (&yt, yl), m, None)
                        .expect("record");
                }
                ctx.queue().submit([enc.finish()]);
                wait(&ctx);
            };
            record(1);
            let got = yt.read(&ctx).unwrap();
            let err = got
                .iter()
                .zip(want.iter())
                .map(|(&g, &w)| (f64::from(g) - w).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-3, "M {m} K {k} N {n} {tile:?}: max error {err}");
            let mut times: Vec<f64> = (0..5)
                .map(|_| {
                    let t = Instant::now();
                    record(iters);
                    t.elapsed().as_secs_f64() / iters as f64
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let median = times[2];
            let gflops = 2.0 * (m * k * n) as f64 / median / 1e9;
            println!(
                "M {m} K {k} N {n} {tile:?}: {:.3} ms, {gflops:.1} GFLOP/s (build {build:.2} s, max error {err:.1e})",
                median * 1e3
            );
        }
    }
}
