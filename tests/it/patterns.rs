//! Attention patterns recomputed on the device (`attention_patterns`) against their
//! float64 reference, and the reference against the full weights of
//! `attention_reference` reduced here by plain loops.

use ndarray::{s, Array3, Array4, ArrayD, IxDyn};
use wgpu_attention::{
    attention_patterns, attention_patterns_sliced_for_tests, attention_reference,
    patterns_reference, Alignment, AttentionError, AttentionOptions, AttentionPatterns, Mask,
    PatternOptions, Window,
};

use crate::common::{assert_close, ctx, qkv, Rng, ATOL, RTOL};

/// Asks for everything in a window, pooled into `pool` cells.
fn everything<'a>(
    heads: Option<&'a [usize]>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    pool: usize,
) -> PatternOptions<'a> {
    PatternOptions {
        heads,
        rows: Some(rows),
        cols: Some(cols),
        weights: true,
        pool: Some(pool),
        entropy: true,
        column_sums: true,
    }
}

fn assert_patterns_close(what: &str, got: &AttentionPatterns, want: &AttentionPatterns) {
    let pair = |a: &Option<Array4<f32>>, b: &Option<Array4<f32>>, name: &str| match (a, b) {
        (Some(a), Some(b)) => {
            assert_close(&format!("{what}: {name}"), a.view(), b.view(), ATOL, RTOL)
        }
        (None, None) => {}
        _ => panic!("{what}: {name} present on one side only"),
    };
    let pair3 = |a: &Option<Array3<f32>>, b: &Option<Array3<f32>>, name: &str| match (a, b) {
        (Some(a), Some(b)) => {
            assert_close(&format!("{what}: {name}"), a.view(), b.view(), ATOL, RTOL)
        }
        (None, None) => {}
        _ => panic!("{what}: {name} present on one side only"),
    };
    pair(&got.weights, &want.weights, "weights");
    pair3(&got.entropy, &want.entropy, "entropy");
    pair3(&got.column_sums, &want.column_sums, "column sums");
    match (&got.pooled, &want.pooled) {
        (Some(g), Some(w)) => {
            assert_eq!(g.row_edges, w.row_edges, "{what}: row edges");
            assert_eq!(g.col_edges, w.col_edges, "{what}: column edges");
            assert_close(
                &format!("{what}: pooled max"),
                g.max.view(),
                w.max.view(),
                ATOL,
                RTOL,
            );
            assert_close(
                &format!("{what}: pooled mean"),
                g.mean.view(),
                w.mean.view(),
                ATOL,
                RTOL,
            );
        }
        (None, None) => {}
        _ => panic!("{what}: pooled present on one side only"),
    }
}

/// The GPU against the reference for one call.
fn check(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
) -> AttentionPatterns {
    let gpu = attention_patterns(ctx(), q.view(), k.view(), opts, ask)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let cpu = patterns_reference(q.view(), k.view(), opts, ask).unwrap();
    assert_patterns_close(what, &gpu, &cpu);
    gpu
}

#[test]
fn every_output_matches_the_reference_under_every_masking_option() {
    let (b, hq, hkv, lq, lk, d) = (2, 4, 2, 37, 45, 16);
    let (q, k, _) = qkv(11, (b, hq, hkv), (lq, lk), (d, d));
    let bool_mask = Rng::new(3).bool_mask(&[b, 1, lq, lk], 0.7);
    let add_mask = Rng::new(4).additive_mask(&[lq, lk], 0.2);
    let lens = [45u32, 20];
    let cases: Vec<(&str, AttentionOptions<'_>)> = vec![
        ("plain", AttentionOptions::default()),
        (
            "causal",
            AttentionOptions {
                causal: true,
                ..Default::default()
            },
        ),
        (
            "causal bottom-right",
            AttentionOptions {
                causal: true,
                alignment: Alignment::BottomRight,
                ..Default::default()
            },
        ),
        (
            "window",
            AttentionOptions {
                window: Some(Window::new(5, 3)),
                scale: Some(0.4),
                ..Default::default()
            },
        ),
        (
            "bool mask + lens",
            AttentionOptions {
                mask: Some(Mask::Bool(bool_mask.view())),
                kv_lens: Some(&lens),
                ..Default::default()
            },
        ),
        (
            "additive mask, causal",
            AttentionOptions {
                mask: Some(Mask::Additive(add_mask.view())),
                causal: true,
                ..Default::default()
            },
        ),
    ];
    let heads: &[usize] = &[3, 0];
    for (name, opts) in &cases {
        check(name, &q, &k, opts, &everything(None, 0..lq, 0..lk, 8));
        check(
            &format!("{name}, window of rows and cols"),
            &q,
            &k,
            opts,
            &everything(Some(heads), 5..30, 7..44, 6),
        );
        check(
            &format!("{name}, more cells than rows"),
            &q,
            &k,
            opts,
            &everything(Some(&heads[..1]), 2..9, 0..lk, 1024),
        );
    }
}

#[test]
fn the_reference_agrees_with_the_full_weights_reduced_by_hand() {
    let (lq, lk) = (23, 31);
    let (q, k, v) = qkv(5, (1, 2, 1), (lq, lk), (8, 8));
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        return_weights: true,
        ..Default::default()
    };
    let full = attention_reference(q.view(), k.view(), v.view(), &opts)
        .unwrap()
        .weights
        .unwrap();
    let opts = AttentionOptions {
        return_weights: false,
        ..opts
    };
    let ask = everything(Some(&[1]), 3..20, 4..29, 5);
    let got = patterns_reference(q.view(), k.view(), &opts, &ask).unwrap();
    let window = full.slice(s![.., 1..2, 3..20, 4..29]);
    assert_close(
        "weights",
        got.weights.as_ref().unwrap().view(),
        window,
        1e-7,
        1e-6,
    );
    let pooled = got.pooled.as_ref().unwrap();
    for r in 0..5 {
        for c in 0..5 {
            let (r0, r1) = (pooled.row_edges[r], pooled.row_edges[r + 1]);
            let (c0, c1) = (pooled.col_edges[c], pooled.col_edges[c + 1]);
            let cell = full.slice(s![0, 1, r0..r1, c0..c1]);
            let max = cell.iter().cloned().fold(0f32, f32::max);
            let mean = cell.iter().map(|&x| x as f64).sum::<f64>() / cell.len() as f64;
            assert!(
                (pooled.max[[0, 0, r, c]] - max).abs() < 1e-6,
                "max of cell {r},{c}"
            );
            assert!(
                (pooled.mean[[0, 0, r, c]] as f64 - mean).abs() < 1e-6,
                "mean of cell {r},{c}"
            );
        }
    }
    assert_eq!(pooled.row_edges, vec![3, 6, 9, 13, 16, 20]);
    for h in 0..2 {
        for i in 3..20 {
            let row = full.slice(s![0, h, i, ..]);
            let ent: f64 = row
                .iter()
                .filter(|&&w| w > 0.0)
                .map(|&w| -(w as f64) * (w as f64).ln())
                .sum();
            assert!((got.entropy.as_ref().unwrap()[[0, h, i - 3]] as f64 - ent).abs() < 1e-5);
        }
        for j in 4..29 {
            let col: f64 = full
                .slice(s![0, h, 3..20, j])
                .iter()
                .map(|&w| w as f64)
                .sum();
            assert!((got.column_sums.as_ref().unwrap()[[0, h, j - 4]] as f64 - col).abs() < 1e-5);
        }
    }
}

#[test]
fn huge_logits_keep_exact_weights() {
    // Two equal logits of about 1e30: each weight is 1/2. A weight from an f32 log-sum-exp
    // would be exp(0) = 1, since 1e30 + ln 2 rounds to 1e30.
    let mut q = Array4::<f32>::zeros((1, 1, 3, 4));
    let mut k = Array4::<f32>::zeros((1, 1, 3, 4));
    q.slice_mut(s![.., .., .., 0]).fill(1e15);
    k.slice_mut(s![.., .., 0..2, 0]).fill(1e15);
    k[[0, 0, 2, 0]] = -1e15;
    let opts = AttentionOptions {
        scale: Some(1.0),
        ..Default::default()
    };
    let got = check(
        "huge logits",
        &q,
        &k,
        &opts,
        &everything(None, 0..3, 0..3, 2),
    );
    let w = got.weights.unwrap();
    assert_eq!(w[[0, 0, 0, 0]], 0.5);
    assert_eq!(w[[0, 0, 0, 2]], 0.0);
}

#[test]
fn nan_rows_and_rows_with_no_key_follow_the_row_rule() {
    let (mut q, k, _) = qkv(8, (1, 1, 1), (6, 7), (4, 4));
    q[[0, 0, 2, 1]] = f32::NAN;
    let mut mask = ArrayD::from_elem(IxDyn(&[6, 7]), true);
    mask.slice_mut(s![4, ..]).fill(false);
    mask[[2, 5]] = false;
    let opts = AttentionOptions {
        mask: Some(Mask::Bool(mask.view())),
        ..Default::default()
    };
    let got = check(
        "nan and empty rows",
        &q,
        &k,
        &opts,
        &everything(None, 0..6, 0..7, 3),
    );
    let w = got.weights.unwrap();
    assert!(w[[0, 0, 2, 0]].is_nan() && w[[0, 0, 2, 5]] == 0.0);
    assert!(w.slice(s![0, 0, 4, ..]).iter().all(|&x| x == 0.0));
    let e = got.entropy.unwrap();
    assert!(e[[0, 0, 2]].is_nan());
    assert_eq!(e[[0, 0, 4]], 0.0);
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    let (q, k, _) = qkv(1, (1, 2, 2), (8, 8), (4, 4));
    let opts = AttentionOptions::default();
    let cases: Vec<(&str, AttentionOptions<'_>, PatternOptions<'_>)> = vec![
        ("patterns", opts.clone(), PatternOptions::default()),
        (
            "heads",
            opts.clone(),
            PatternOptions {
                heads: Some(&[2]),
                weights: true,
                ..Default::default()
            },
        ),
        (
            "heads",
            opts.clone(),
            PatternOptions {
                heads: Some(&[]),
                weights: true,
                ..Default::default()
            },
        ),
        (
            "heads",
            opts.clone(),
            PatternOptions {
                heads: Some(&[1, 1]),
                weights: true,
                ..Default::default()
            },
        ),
        (
            "rows",
            opts.clone(),
            PatternOptions {
                rows: Some(3..3),
                weights: true,
                ..Default::default()
            },
        ),
        (
            "rows",
            opts.clone(),
            PatternOptions {
                rows: Some(0..9),
                weights: true,
                ..Default::default()
            },
        ),
        (
            "cols",
            opts.clone(),
            PatternOptions {
                cols: Some(7..9),
                entropy: true,
                ..Default::default()
            },
        ),
        (
            "pool",
            opts.clone(),
            PatternOptions {
                pool: Some(0),
                ..Default::default()
            },
        ),
        (
            "pool",
            opts.clone(),
            PatternOptions {
                pool: Some(1025),
                ..Default::default()
            },
        ),
        (
            "return_weights",
            AttentionOptions {
                return_weights: true,
                ..Default::default()
            },
            PatternOptions {
                entropy: true,
                ..Default::default()
            },
        ),
        (
            "return_lse",
            AttentionOptions {
                return_lse: true,
                ..Default::default()
            },
            PatternOptions {
                entropy: true,
                ..Default::default()
            },
        ),
        (
            "precision",
            AttentionOptions {
                precision: wgpu_attention::Precision::F16,
                ..Default::default()
            },
            PatternOptions {
                entropy: true,
                ..Default::default()
            },
        ),
        (
            "path",
            AttentionOptions {
                path: wgpu_attention::KernelPath::Fused,
                ..Default::default()
            },
            PatternOptions {
                entropy: true,
                ..Default::default()
            },
        ),
    ];
    for (arg, opts, ask) in cases {
        for (side, r) in [
            (
                "gpu",
                attention_patterns(ctx(), q.view(), k.view(), &opts, &ask),
            ),
            ("cpu", patterns_reference(q.view(), k.view(), &opts, &ask)),
        ] {
            match r {
                Err(AttentionError::InvalidOption { arg: a, .. }) => {
                    assert_eq!(a, arg, "{side}: {ask:?}")
                }
                other => {
                    panic!("{side}: {ask:?}: expected an InvalidOption naming {arg}, got {other:?}")
                }
            }
        }
    }
    // Shape errors are those of every call.
    let bad_k = Array4::<f32>::zeros((1, 2, 8, 5));
    let ask = PatternOptions {
        entropy: true,
        ..Default::default()
    };
    assert!(matches!(
        attention_patterns(ctx(), q.view(), bad_k.view(), &opts, &ask),
        Err(AttentionError::Shape { .. })
    ));
}

#[test]
fn weights_beyond_a_binding_are_refused_pointing_at_the_pool() {
    let ctx = crate::common::context_with_limits(|l| wgpu::Limits {
        max_storage_buffer_binding_size: 1 << 16,
        ..l
    });
    let (q, k, _) = qkv(2, (1, 1, 1), (200, 200), (4, 4));
    let ask = PatternOptions {
        weights: true,
        ..Default::default()
    };
    let err = attention_patterns(&ctx, q.view(), k.view(), &AttentionOptions::default(), &ask)
        .unwrap_err();
    assert!(
        matches!(err, AttentionError::TooLarge { arg: "weights", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("pool"), "{err}");
    let ask = PatternOptions {
        pool: Some(64),
        entropy: true,
        ..Default::default()
    };
    let got =
        attention_patterns(&ctx, q.view(), k.view(), &AttentionOptions::default(), &ask).unwrap();
    let want = patterns_reference(q.view(), k.view(), &AttentionOptions::default(), &ask).unwrap();
    assert_patterns_close("pooled under a small binding", &got, &want);
}

#[test]
fn long_rows_are_computed_within_a_capped_driver_s_loop_count() {
    // 2,048 keys of 64 dims loop past llvmpipe's (before Mesa 25) 65,535 iterations per
    // invocation in one recording; the call slices the work and must match the
    // reference on every driver.
    let (q, k, _) = qkv(21, (1, 2, 1), (9, 2048), (64, 64));
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        ..Default::default()
    };
    let ask = PatternOptions {
        entropy: true,
        pool: Some(4),
        column_sums: true,
        ..Default::default()
    };
    check("long rows", &q, &k, &opts, &ask);
}

#[test]
fn a_driver_that_cuts_long_loops_short_gives_an_error_not_wrong_patterns() {
    // The same long rows in one recording per stage: where the driver cuts loops, the call
    // must say so; elsewhere it must match the reference.
    let (q, k, _) = qkv(21, (1, 1, 1), (8, 2048), (64, 64));
    let ask = PatternOptions {
        entropy: true,
        pool: Some(4),
        ..Default::default()
    };
    let opts = AttentionOptions::default();
    let unsliced =
        attention_patterns_sliced_for_tests(ctx(), (q.view(), k.view()), &opts, &ask, None);
    match pollster::block_on(unsliced) {
        Ok(got) => {
            let want = patterns_reference(q.view(), k.view(), &opts, &ask).unwrap();
            assert_patterns_close("long rows", &got, &want);
        }
        Err(AttentionError::TooLarge {
            arg: "rows",
            detail,
        }) => {
            assert_eq!(
                ctx().adapter_info().device_type,
                wgpu::DeviceType::Cpu,
                "{detail}"
            );
            assert!(detail.contains("65,535"), "{detail}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_slicing_of_the_work_gives_the_reference() {
    // Budgets of 1 (a slice per key, row or cell row), a few, and none, with a head dim
    // that is not a multiple of 4, under masks, windows, key lengths and a NaN row.
    let (b, hq, hkv, lq, lk, d) = (2, 2, 1, 19, 23, 7);
    let (mut q, k, _) = qkv(17, (b, hq, hkv), (lq, lk), (d, d));
    q[[1, 0, 4, 2]] = f32::NAN;
    let mask = Rng::new(9).bool_mask(&[b, 1, lq, lk], 0.8);
    let lens = [23u32, 11];
    let cases: Vec<(&str, AttentionOptions<'_>)> = vec![
        ("plain", AttentionOptions::default()),
        (
            "causal",
            AttentionOptions {
                causal: true,
                ..Default::default()
            },
        ),
        (
            "window, mask and lens",
            AttentionOptions {
                window: Some(Window::new(4, 2)),
                mask: Some(Mask::Bool(mask.view())),
                kv_lens: Some(&lens),
                ..Default::default()
            },
        ),
    ];
    for (name, opts) in &cases {
        for ask in [
            everything(None, 0..lq, 0..lk, 4),
            everything(Some(&[1, 0]), 3..17, 2..21, 3),
        ] {
            let want = patterns_reference(q.view(), k.view(), opts, &ask).unwrap();
            for budget in [Some(1), Some(30), Some(200), None] {
                let call = attention_patterns_sliced_for_tests(
                    ctx(),
                    (q.view(), k.view()),
                    opts,
                    &ask,
                    budget,
                );
                let got = pollster::block_on(call).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_patterns_close(&format!("{name}, budget {budget:?}"), &got, &want);
            }
        }
    }
}
