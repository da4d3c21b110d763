//! Many calls do not grow memory: every buffer a call makes is freed once the call is
//! done (there is no pool to grow), on the device and in the process.

use crate::common::Rng;
use ndarray::{Array2, Array4};
use wgpu_attention::*;

/// Resident set size of this process in bytes, from /proc/self/status.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// Bytes the device's allocator holds, where the backend reports it.
fn device_bytes(ctx: &GpuContext) -> Option<u64> {
    ctx.device()
        .generate_allocator_report()
        .map(|r| r.total_allocated_bytes)
}

struct Inputs {
    q: Array4<f32>,
    k: Array4<f32>,
    v: Array4<f32>,
    mask: Array2<bool>,
}

fn inputs(rng: &mut Rng, n: usize) -> Inputs {
    let (b, hq, hkv, lq, lk, d, dv) = [
        (1, 2, 1, 5, 7, 8, 8),
        (2, 4, 2, 17, 9, 16, 4),
        (1, 1, 1, 33, 40, 4, 12),
        (2, 2, 2, 1, 64, 8, 8),
        (1, 3, 1, 16, 16, 32, 16),
    ][n % 5];
    Inputs {
        q: rng.array4((b, hq, lq, d)),
        k: rng.array4((b, hkv, lk, d)),
        v: rng.array4((b, hkv, lk, dv)),
        mask: Array2::from_shape_fn((lq, lk), |(i, j)| (i + 2 * j) % 5 != 0),
    }
}

/// One call of a mix: host arrays or device tensors, with or without masks and
/// extra outputs.
fn call(ctx: &GpuContext, x: &Inputs, n: usize) {
    let opts = AttentionOptions {
        causal: n.is_multiple_of(3),
        mask: (n % 4 == 1).then(|| Mask::Bool(x.mask.view().into_dyn())),
        return_weights: n.is_multiple_of(2),
        return_lse: n % 5 < 2,
        ..Default::default()
    };
    if n % 7 == 3 {
        let up = |a: &Array4<f32>| GpuTensor::from_array(ctx, a.view().into_dyn()).unwrap();
        let (q, k, v) = (up(&x.q), up(&x.k), up(&x.v));
        let outputs = pollster::block_on(attention_gpu_async(ctx, &q, &k, &v, &opts)).unwrap();
        pollster::block_on(outputs.read_async(ctx)).unwrap();
    } else {
        attention(ctx, x.q.view(), x.k.view(), x.v.view(), &opts).unwrap();
    }
}

fn run_calls(ctx: &GpuContext, all: &[Inputs], range: std::ops::Range<usize>) {
    for n in range {
        call(ctx, &all[n % all.len()], n);
    }
}

#[test]
#[ignore = "10,000 GPU calls take about 20 s on a software rasteriser; run by .ci/run"]
fn ten_thousand_calls_keep_memory_flat() {
    let ctx = GpuContext::new().expect("no GPU adapter");
    let mut rng = Rng::new(81);
    let all: Vec<Inputs> = (0..10).map(|n| inputs(&mut rng, n)).collect();
    // Warm-up: pipelines compiled, allocator pools and driver caches filled.
    run_calls(&ctx, &all, 0..500);
    let (rss0, dev0) = (rss_bytes(), device_bytes(&ctx));
    let mut samples = Vec::new();
    for block in 0..10 {
        let start = 500 + block * 1_000;
        run_calls(&ctx, &all, start..start + 1_000);
        samples.push((rss_bytes(), device_bytes(&ctx)));
    }
    let (rss1, dev1) = samples[samples.len() - 1];
    eprintln!("rss {rss0} -> {rss1} bytes; device {dev0:?} -> {dev1:?}; samples {samples:?}");
    // Flat: no more than 16 MiB of process growth over 10,000 calls (a leak of one small
    // buffer per call would be several times that), and the device allocator back
    // where it was, give or take one call's buffers.
    assert!(
        rss1 <= rss0 + (16 << 20),
        "process memory grew from {rss0} to {rss1} bytes: {samples:?}"
    );
    if let (Some(d0), Some(d1)) = (dev0, dev1) {
        assert!(
            d1 <= d0 + (4 << 20),
            "device allocations grew from {d0} to {d1} bytes: {samples:?}"
        );
    }
}

#[test]
fn a_thousand_calls_return_device_memory() {
    let ctx = GpuContext::new().expect("no GPU adapter");
    let Some(_) = device_bytes(&ctx) else {
        panic!("this backend gives no allocator report: run the #[ignore]d RSS test instead");
    };
    let mut rng = Rng::new(82);
    let all: Vec<Inputs> = (0..5).map(|n| inputs(&mut rng, n)).collect();
    run_calls(&ctx, &all, 0..100);
    let before = device_bytes(&ctx).unwrap_or_default();
    run_calls(&ctx, &all, 100..1_100);
    let after = device_bytes(&ctx).unwrap_or_default();
    assert!(
        after <= before + (4 << 20),
        "device allocations grew from {before} to {after} bytes over 1,000 calls"
    );
}
