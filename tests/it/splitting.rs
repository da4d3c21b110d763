//! Problems larger than one storage binding, or than 65,535 workgroups in a dimension,
//! are split into several dispatches transparently. `GpuContext::with_max_binding`
//! forces heavy splitting at small shapes; every case is checked against the CPU
//! reference with NaN-filled outputs.

use crate::common::*;
use ndarray::{Array, ArrayD, IxDyn};
use wgpu_attention::*;

fn capped(bytes: u64) -> GpuContext {
    GpuContext::new()
        .expect("no GPU adapter")
        .with_max_binding(bytes)
}

type Plan = Vec<(usize, usize, usize, usize)>;

fn plan_of(ctx: &GpuContext, shapes: [&[usize]; 3], opts: &AttentionOptions<'_>) -> Plan {
    staged_plan_for_tests(ctx, shapes[0], shapes[1], shapes[2], opts).unwrap()
}

fn has_partial_rows(plan: &Plan, len_q: usize) -> bool {
    plan.iter().any(|&(_, _, _, rows)| rows < len_q)
}

fn has_multi_head(plan: &Plan) -> bool {
    plan.iter().any(|&(_, heads, _, _)| heads > 1)
}

#[test]
fn whole_head_chunks_with_gqa_crossing_chunk_and_batch_boundaries() {
    let mut rng = Rng::new(11);
    // Hq = 6 over Hkv = 2: groups of 3 query heads, so most chunk edges cut a group,
    // and chunks run across the batch boundary at flattened head 6.
    let (q, k, v) = (
        rng.array4((3, 6, 20, 16)),
        rng.array4((3, 2, 24, 16)),
        rng.array4((3, 2, 24, 12)),
    );
    let opts = AttentionOptions {
        return_weights: true,
        return_lse: true,
        ..Default::default()
    };
    let (mut crossed_batch, mut crossed_group) = (false, false);
    for cap in [4_100, 6_000, 7_000, 9_000] {
        let ctx = capped(cap);
        let plan = plan_of(&ctx, [q.shape(), k.shape(), v.shape()], &opts);
        assert!(
            plan.len() > 3 && has_multi_head(&plan),
            "cap {cap}: {plan:?}"
        );
        crossed_batch |= plan.iter().any(|&(s, n, _, _)| s / 6 != (s + n - 1) / 6);
        crossed_group |= plan.iter().any(|&(s, n, _, _)| s % 3 != 0 || n % 3 != 0);
        check_against_reference_on(&ctx, &format!("cap {cap}"), &q, &k, &v, &opts);
    }
    assert!(crossed_batch && crossed_group);
}

#[test]
fn partial_row_chunks() {
    let mut rng = Rng::new(12);
    // One head's scores (40 x 70 f32 = 11 KiB) exceed the cap: rows are split.
    let (q, k, v) = (
        rng.array4((2, 2, 40, 8)),
        rng.array4((2, 1, 70, 8)),
        rng.array4((2, 1, 70, 12)),
    );
    for causal in [false, true] {
        let opts = AttentionOptions {
            causal,
            alignment: Alignment::BottomRight,
            return_weights: true,
            return_lse: true,
            ..Default::default()
        };
        for cap in [4_096, 5_800, 8_192] {
            let ctx = capped(cap);
            let plan = plan_of(&ctx, [q.shape(), k.shape(), v.shape()], &opts);
            assert!(has_partial_rows(&plan, 40), "cap {cap}: {plan:?}");
            let what = format!("cap {cap} causal {causal}");
            check_against_reference_on(&ctx, &what, &q, &k, &v, &opts);
        }
    }
}

/// A mask of `shape` (broadcast to the scores' shape), boolean or additive, with
/// every row keeping at least some keys.
fn masks(rng: &mut Rng, shape: &[usize]) -> (ArrayD<bool>, ArrayD<f32>) {
    let bools = Array::from_shape_simple_fn(IxDyn(shape), || rng.uniform() < 0.7);
    let bias = Array::from_shape_simple_fn(IxDyn(shape), || {
        let u = rng.uniform();
        if u < 0.2 {
            f32::NEG_INFINITY
        } else {
            (u as f32 - 0.5) * 4.0
        }
    });
    (bools, bias)
}

#[test]
fn mask_windows_with_broadcasting_across_chunks() {
    let mut rng = Rng::new(13);
    let (b, hq, hkv, lq, lk) = (2, 4, 2, 24, 36);
    let (q, k, v) = (
        rng.array4((b, hq, lq, 8)),
        rng.array4((b, hkv, lk, 8)),
        rng.array4((b, hkv, lk, 8)),
    );
    let shapes: [&[usize]; 7] = [
        &[lq, lk],
        &[1, lk],
        &[hq, lq, lk],
        &[hq, 1, lk],
        &[b, 1, lq, lk],
        &[1, hq, 1, lk],
        &[b, hq, lq, lk],
    ];
    // 8,000 bytes: two heads per chunk; 1,600: rows of one head.
    for cap in [8_000, 1_600] {
        let ctx = capped(cap);
        for shape in shapes {
            let (bools, bias) = masks(&mut rng, shape);
            for mask in [Mask::Bool(bools.view()), Mask::Additive(bias.view())] {
                let kind = match mask {
                    Mask::Bool(_) => "bool",
                    Mask::Additive(_) => "additive",
                };
                let opts = AttentionOptions {
                    mask: Some(mask),
                    kv_lens: Some(&[30, 17]),
                    window: Some(Window::new(9, 5)),
                    return_weights: true,
                    return_lse: true,
                    ..Default::default()
                };
                let plan = plan_of(&ctx, [q.shape(), k.shape(), v.shape()], &opts);
                assert!(plan.len() >= 4, "cap {cap} mask {shape:?}: {plan:?}");
                let what = format!("cap {cap} {kind} mask {shape:?}");
                check_against_reference_on(&ctx, &what, &q, &k, &v, &opts);
            }
        }
    }
}

#[test]
fn a_cap_too_small_for_one_row_is_too_large() {
    let ctx = capped(256);
    let mut rng = Rng::new(14);
    let (q, k) = (rng.array4((1, 1, 4, 64)), rng.array4((1, 1, 100, 64)));
    match attention(&ctx, q.view(), k.view(), k.view(), &Default::default()) {
        Err(AttentionError::TooLarge { arg: "k", detail }) => {
            assert!(detail.contains("256-byte binding limit"), "{detail}")
        }
        other => panic!("expected TooLarge for k, got {other:?}"),
    }
}

#[test]
fn more_than_65535_workgroups_in_a_launch() {
    let ctx = ctx();
    assert!(
        ctx.limits().max_compute_workgroups_per_dimension < 70_000,
        "this case needs a per-dimension limit below 70,000 to wrap the grid"
    );
    let mut rng = Rng::new(15);
    // 70,000 rows of one head: the softmax launches one workgroup per row.
    let (q, k, v) = (
        rng.array4((1, 1, 70_000, 4)),
        rng.array4((1, 1, 5, 4)),
        rng.array4((1, 1, 5, 4)),
    );
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        return_weights: true,
        return_lse: true,
        ..Default::default()
    };
    check_against_reference_on(ctx, "70,000 rows", &q, &k, &v, &opts);
}

#[test]
#[ignore = "about 15 s on a software rasteriser; run by .ci/run"]
fn more_than_65535_workgroups_in_every_kernel() {
    let ctx = ctx();
    let mut rng = Rng::new(16);
    // 70,000 heads of one row, each with its own key/value head: every kernel of every
    // path launches at least one workgroup per head, past the per-dimension limit.
    let (q, k, v) = (
        rng.array4((1, 70_000, 1, 4)),
        rng.array4((1, 70_000, 3, 4)),
        rng.array4((1, 70_000, 3, 4)),
    );
    for path in [KernelPath::Staged, KernelPath::Fused, KernelPath::Decode] {
        let opts = AttentionOptions {
            return_lse: true,
            path,
            ..Default::default()
        };
        check_against_reference_on(ctx, &format!("70,000 heads, {path:?}"), &q, &k, &v, &opts);
    }
}

/// A device that allows only 100 workgroups per dimension: every kernel's launch
/// wraps onto a 2-D grid at small, fast shapes.
fn few_workgroups_device() -> GpuContext {
    context_with_limits(|l| wgpu::Limits {
        max_compute_workgroups_per_dimension: 100,
        ..l
    })
}

#[test]
fn every_kernel_wraps_its_grid_past_the_per_dimension_limit() {
    let ctx = few_workgroups_device();
    let mut rng = Rng::new(17);
    // 2 x 150 heads: Q·Kᵀ and weights·V launch 300 workgroups, the softmax 1,500.
    let (q, k, v) = (
        rng.array4((2, 150, 5, 8)),
        rng.array4((2, 30, 7, 8)),
        rng.array4((2, 30, 7, 8)),
    );
    let opts = AttentionOptions {
        causal: true,
        return_weights: true,
        return_lse: true,
        ..Default::default()
    };
    check_against_reference_on(&ctx, "300 heads", &q, &k, &v, &opts);
    // The fused and decode kernels launch a workgroup per K/V head (and key range), the
    // combine pass one per row: with a K/V head per query head, 300 and 1,500.
    let (k, v) = (rng.array4((2, 150, 7, 8)), rng.array4((2, 150, 7, 8)));
    for path in [KernelPath::Fused, KernelPath::Decode] {
        let opts = AttentionOptions {
            causal: true,
            return_lse: true,
            path,
            ..Default::default()
        };
        check_against_reference_on(&ctx, &format!("300 heads, {path:?}"), &q, &k, &v, &opts);
    }
    // Beyond 100 x 100 workgroups the launch cannot be expressed: a clear error. (The
    // staged softmax launches one workgroup per row.)
    let (q, k) = (rng.array4((1, 1, 10_001, 4)), rng.array4((1, 1, 3, 4)));
    let staged = AttentionOptions {
        path: KernelPath::Staged,
        ..Default::default()
    };
    match attention(&ctx, q.view(), k.view(), k.view(), &staged) {
        Err(AttentionError::TooLarge { detail, .. }) => {
            assert!(detail.contains("100 x 100 grid"), "{detail}")
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
