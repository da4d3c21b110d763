//! f16 storage with f32 accumulation: within a Frobenius relative error of 2e-3 of the
//! f64 reference on both the fused and decode kernels, from host arrays (uploaded as f16)
//! and from f32 device tensors (converted on the device); refused clearly where it
//! cannot run.

use crate::common::*;
use crate::paths::*;
use ndarray::Array4;
use wgpu_attention::*;

fn f16_opts(path: KernelPath, causal: bool) -> AttentionOptions<'static> {
    AttentionOptions {
        path,
        causal,
        precision: Precision::F16,
        return_lse: true,
        ..Default::default()
    }
}

fn check_f16(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    let cpu = attention_reference(q.view(), k.view(), v.view(), opts).expect("cpu");
    // From host arrays: uploaded as f16.
    let host = attention(ctx(), q.view(), k.view(), v.view(), opts).expect("gpu f16");
    // From f32 device tensors into NaN-filled outputs: converted on the device.
    let device = run_gpu(q, k, v, opts);
    for (how, gpu) in [("host", &host), ("device", &device)] {
        let e = frobenius(gpu.out.view(), cpu.out.view());
        assert!(e <= F16_BOUND, "{what} ({how}): out relative error {e}");
        let (gl, cl) = (gpu.lse.as_ref().unwrap(), cpu.lse.as_ref().unwrap());
        let e = frobenius(gl.view(), cl.view());
        assert!(e <= F16_BOUND, "{what} ({how}): lse relative error {e}");
        assert_eq!(gpu.weights.is_some(), opts.return_weights, "{what} ({how})");
        if let (Some(gw), Some(cw)) = (&gpu.weights, &cpu.weights) {
            let e = frobenius(gw.view(), cw.view());
            assert!(e <= F16_BOUND, "{what} ({how}): weights relative error {e}");
        }
    }
}

#[test]
fn fused_f16_within_bound() {
    for (n, &(lq, lk, d)) in [(1, 1, 1), (17, 63, 64), (65, 129, 128), (33, 40, 256)]
        .iter()
        .enumerate()
    {
        let (q, k, v) = qkv(1300 + n as u64, (1, 4, 2), (lq, lk), (d, d));
        for causal in [false, true] {
            let what = format!("fused Lq {lq} Lk {lk} D {d} causal {causal}");
            check_f16(&what, &q, &k, &v, &f16_opts(KernelPath::Fused, causal));
        }
    }
}

#[test]
fn decode_f16_within_bound() {
    for (n, &(lq, lk, d)) in [(1, 1500, 64), (4, 700, 128), (16, 2049, 32)]
        .iter()
        .enumerate()
    {
        let (q, k, v) = qkv(1400 + n as u64, (2, 8, 2), (lq, lk), (d, d));
        let what = format!("decode Lq {lq} Lk {lk} D {d}");
        check_f16(&what, &q, &k, &v, &f16_opts(KernelPath::Decode, true));
    }
}

#[test]
fn auto_f16_with_mask_and_lengths() {
    let (q, k, v) = qkv(1500, (2, 4, 1), (30, 70), (16, 24));
    let keep = bool_mask(1501, &[30, 70], 0.7);
    let lens = [70u32, 41];
    let opts = AttentionOptions {
        mask: Some(Mask::Bool(keep.view())),
        kv_lens: Some(&lens),
        return_weights: true,
        ..f16_opts(KernelPath::Auto, false)
    };
    check_f16("auto f16 masked", &q, &k, &v, &opts);
}

#[test]
fn f16_keeps_the_row_rules() {
    let (mut q, k, mut v) = qkv(1600, (1, 2, 1), (8, 20), (8, 8));
    q[[0, 1, 2, 0]] = f32::NAN;
    // Beyond f16's range: rounds to infinity in V, behind keys causal hides from row 0.
    v[[0, 0, 15, 3]] = 1e6;
    let opts = f16_opts(KernelPath::Fused, true);
    let gpu = run_gpu(&q, &k, &v, &opts);
    let lse = gpu.lse.unwrap();
    assert!(gpu.out[[0, 1, 2, 0]].is_nan() && lse[[0, 1, 2]].is_nan());
    assert!(gpu.out[[0, 0, 0, 3]].is_finite());
}

#[test]
fn f16_refuses_the_staged_path() {
    let (q, k, v) = qkv(1700, (1, 1, 1), (4, 4), (8, 8));
    let err = attention(
        ctx(),
        q.view(),
        k.view(),
        v.view(),
        &f16_opts(KernelPath::Staged, false),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            AttentionError::InvalidOption {
                arg: "precision",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn f16_without_the_adapter_feature_is_unsupported() {
    // A device opened without optional features (shader-f16 among them), at wgpu's
    // default limits.
    let c = context_with_limits(|_| wgpu::Limits::default());
    let (q, k, v) = qkv(1800, (1, 1, 1), (4, 4), (8, 8));
    let err = attention(
        &c,
        q.view(),
        k.view(),
        v.view(),
        &f16_opts(KernelPath::Auto, false),
    )
    .unwrap_err();
    assert!(
        matches!(&err, AttentionError::Unsupported(m) if m.contains("shader-f16")),
        "{err}"
    );
}
