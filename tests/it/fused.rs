//! The fused flash-attention kernel against the CPU reference: every option, shapes that
//! straddle tile edges, head dims 1 to 256, and the NaN / -inf / fully-masked row rules.

use crate::common::*;
use crate::paths::*;
use ndarray::{s, Array4};
use wgpu_attention::*;

fn fused(extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
    on_path(KernelPath::Fused, extra)
}

#[test]
fn lengths_straddling_tile_edges() {
    for (n, &(lq, lk)) in [
        (1, 1),
        (1, 17),
        (15, 16),
        (17, 15),
        (16, 63),
        (64, 65),
        (65, 64),
        (127, 129),
        (129, 128),
    ]
    .iter()
    .enumerate()
    {
        let (q, k, v) = qkv(100 + n as u64, (1, 2, 2), (lq, lk), (16, 16));
        check_against_reference(
            &format!("Lq {lq} Lk {lk}"),
            &q,
            &k,
            &v,
            &fused(Default::default()),
        );
        let causal = fused(AttentionOptions {
            causal: true,
            ..Default::default()
        });
        check_against_reference(&format!("causal Lq {lq} Lk {lk}"), &q, &k, &v, &causal);
    }
}

#[test]
fn head_dims_1_to_256() {
    for (n, &(d, dv)) in [(1, 1), (64, 64), (128, 128), (256, 256), (17, 65), (256, 1)]
        .iter()
        .enumerate()
    {
        let (q, k, v) = qkv(200 + n as u64, (1, 2, 1), (33, 40), (d, dv));
        let opts = fused(AttentionOptions {
            causal: n % 2 == 0,
            ..Default::default()
        });
        check_against_reference(&format!("D {d} Dv {dv}"), &q, &k, &v, &opts);
    }
}

#[test]
fn head_dim_above_256_is_refused_and_auto_falls_back() {
    let (q, k, v) = qkv(300, (1, 1, 1), (5, 7), (257, 8));
    let err = refused_by_path(&q, &k, &v, &fused(Default::default()));
    assert!(err.to_string().contains("257"), "{err}");
    let auto = on_path(KernelPath::Auto, Default::default());
    check_against_reference("auto D 257", &q, &k, &v, &auto);
}

#[test]
fn weights_come_from_the_log_sum_exp_under_every_mask() {
    // The weights pass recomputes each score and reads the row's lse: every masking rule,
    // grouped heads, a head dim that is not a multiple of four, keys not a multiple of
    // the pass's four keys per invocation.
    let (q, k, v) = qkv(301, (2, 4, 2), (13, 37), (7, 5));
    let every = EveryOption::with_short_lens(310, 13, 37, [20, 1], Window::new(6, 1));
    let lens = [37u32, 9];
    let bias = Array4::from_shape_fn((2, 1, 13, 37), |(b, _, i, j)| {
        if (i + j + b) % 5 == 0 {
            f32::NEG_INFINITY
        } else {
            ((i * 3 + j) % 7) as f32 * 0.25
        }
    })
    .into_dyn();
    let mut cases = every.cases();
    cases.extend([
        ("causal bottom-right", bottom_right_causal()),
        (
            "window 4,2 and key lengths",
            AttentionOptions {
                window: Some(Window::new(4, 2)),
                kv_lens: Some(&lens),
                ..Default::default()
            },
        ),
        (
            "additive mask, scale 0.3",
            AttentionOptions {
                mask: Some(Mask::Additive(bias.view())),
                scale: Some(0.3),
                ..Default::default()
            },
        ),
    ]);
    for (what, extra) in cases {
        let opts = fused(AttentionOptions {
            return_weights: true,
            ..extra
        });
        check_against_reference(what, &q, &k, &v, &opts);
    }
}

#[test]
fn weights_split_across_chunks_land_where_they_belong() {
    // Small bindings split the weights into many chunks whose windows start between
    // alignment boundaries.
    let c = small_binding_ctx(4096);
    let (q, k, v) = qkv(302, (1, 3, 3), (41, 29), (8, 8));
    let opts = fused(AttentionOptions {
        return_weights: true,
        causal: true,
        ..Default::default()
    });
    check_against_reference_on(&c, "chunked weights", &q, &k, &v, &opts);
}

#[test]
fn alignments_and_windows() {
    let (q, k, v) = qkv(400, (2, 2, 2), (37, 70), (16, 24));
    let cases: Vec<(&str, AttentionOptions<'_>)> = vec![
        ("causal bottom-right", bottom_right_causal()),
        (
            "window 5,3",
            AttentionOptions {
                window: Some(Window::new(5, 3)),
                ..Default::default()
            },
        ),
        (
            "window left only, causal",
            AttentionOptions {
                causal: true,
                window: Some(Window {
                    left: Some(20),
                    right: None,
                }),
                ..Default::default()
            },
        ),
        (
            "window 0,0 bottom-right",
            AttentionOptions {
                window: Some(Window::new(0, 0)),
                alignment: Alignment::BottomRight,
                ..Default::default()
            },
        ),
    ];
    for (what, opts) in cases {
        check_against_reference(what, &q, &k, &v, &fused(opts));
    }
    // Top-left causal with more queries than keys: the last rows see every key, and
    // bottom-right with more queries than keys leaves the first rows empty.
    let (q, k, v) = qkv(401, (1, 2, 1), (70, 33), (8, 8));
    for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
        let opts = fused(AttentionOptions {
            causal: true,
            alignment,
            ..Default::default()
        });
        check_against_reference(&format!("Lq > Lk {alignment:?}"), &q, &k, &v, &opts);
    }
}

#[test]
fn masks_and_key_lengths() {
    // Every option, then masks of other ranks and combinations.
    let (q, k, v) = qkv(500, (2, 4, 2), (65, 66), (16, 16));
    let every = EveryOption::with_short_lens(510, 65, 66, [40, 1], Window::new(20, 3));
    let b2 = bool_mask(501, &[65, 66], 0.6);
    let b4 = bool_mask(502, &[2, 1, 65, 66], 0.3);
    let add = additive_mask(503, &[2, 4, 65, 66], 0.2);
    let lens_mid = [31u32, 65];
    let mut cases = every.cases();
    cases.extend([
        (
            "bool 2d",
            AttentionOptions {
                mask: Some(Mask::Bool(b2.view())),
                ..Default::default()
            },
        ),
        (
            "bool 4d broadcast, causal",
            AttentionOptions {
                mask: Some(Mask::Bool(b4.view())),
                causal: true,
                ..Default::default()
            },
        ),
        (
            "additive 4d with -inf",
            AttentionOptions {
                mask: Some(Mask::Additive(add.view())),
                ..Default::default()
            },
        ),
        (
            "kv_lens, window, bottom-right causal",
            AttentionOptions {
                kv_lens: Some(&lens_mid),
                window: Some(Window::new(9, 0)),
                ..bottom_right_causal()
            },
        ),
    ]);
    for (what, opts) in cases {
        check_against_reference(what, &q, &k, &v, &fused(opts));
    }
}

#[test]
fn grouped_and_multi_query_heads() {
    for (n, &(hq, hkv)) in [(8, 2), (6, 1), (4, 4)].iter().enumerate() {
        let (q, k, v) = qkv(600 + n as u64, (2, hq, hkv), (19, 47), (32, 16));
        let opts = fused(AttentionOptions {
            causal: n != 1,
            ..Default::default()
        });
        check_against_reference(&format!("Hq {hq} Hkv {hkv}"), &q, &k, &v, &opts);
    }
}

#[test]
fn row_rules_nan_inf_and_empty_rows() {
    let (mut q, mut k, mut v) = qkv(700, (1, 2, 1), (20, 40), (8, 8));
    // A NaN in one query row: that row (both heads see their own q) is NaN.
    q[[0, 0, 3, 2]] = f32::NAN;
    // A NaN in key 25: every row that attends it (positions from 25 on) is NaN.
    k[[0, 0, 25, 1]] = f32::NAN;
    // NaN and inf in V behind keys the causal mask hides from early rows only.
    v[[0, 0, 30, 0]] = f32::NAN;
    v[[0, 0, 35, 4]] = f32::INFINITY;
    // An infinite logit (q·k = +inf) in head 1, row 10: the row is NaN.
    q[[0, 1, 10, 0]] = f32::INFINITY;
    // A bool mask that empties row 12 entirely.
    let mut keep = ndarray::Array2::from_elem((20, 40), true);
    keep.slice_mut(s![12, ..]).fill(false);
    let opts = fused(AttentionOptions {
        mask: Some(Mask::Bool(keep.view().into_dyn())),
        ..bottom_right_causal()
    });
    let gpu = check_against_reference("NaN, inf and empty rows", &q, &k, &v, &opts);
    // The rules themselves, not only agreement with the reference.
    let lse = gpu.lse.unwrap();
    assert!(gpu.out[[0, 0, 3, 0]].is_nan() && lse[[0, 0, 3]].is_nan());
    assert!(gpu.out[[0, 1, 10, 0]].is_nan() && lse[[0, 1, 10]].is_nan());
    assert!(gpu.out.slice(s![0, .., 12, ..]).iter().all(|&x| x == 0.0));
    assert_eq!(lse[[0, 0, 12]], f32::NEG_INFINITY);
    // Row 0 (position 20) cannot see keys 25, 30 or 35: no NaN or inf leaks in.
    assert!(gpu.out.slice(s![0, 1, 0, ..]).iter().all(|x| x.is_finite()));
    assert!(gpu.out[[0, 1, 6, 0]].is_nan());
}

#[test]
fn additive_minus_inf_rows_are_empty_not_nan() {
    let (q, k, v) = qkv(800, (1, 1, 1), (4, 9), (8, 8));
    let mut bias = Array4::<f32>::zeros((1, 1, 4, 9));
    bias.slice_mut(s![0, 0, 2, ..]).fill(f32::NEG_INFINITY);
    bias[[0, 0, 1, 3]] = f32::NEG_INFINITY;
    let bias = bias.into_dyn();
    let opts = fused(AttentionOptions {
        mask: Some(Mask::Additive(bias.view())),
        ..Default::default()
    });
    let gpu = check_against_reference("additive -inf rows", &q, &k, &v, &opts);
    assert!(gpu.out.slice(s![0, 0, 2, ..]).iter().all(|&x| x == 0.0));
    assert_eq!(gpu.lse.as_ref().unwrap()[[0, 0, 2]], f32::NEG_INFINITY);
}

#[test]
fn chunked_by_a_small_binding_limit() {
    // 16 KiB bindings: q of one head (70 x 64 x 4 bytes) no longer fits, so the
    // problem runs as row chunks of single heads.
    let c = small_binding_ctx(16 * 1024);
    let (q, k, v) = qkv(900, (2, 4, 2), (70, 50), (64, 32));
    let lens = [50u32, 23];
    let opts = fused(AttentionOptions {
        causal: true,
        kv_lens: Some(&lens),
        ..Default::default()
    });
    check_against_reference_on(&c, "chunked", &q, &k, &v, &opts);
}

#[test]
fn auto_without_weights_matches_reference() {
    let (q, k, v) = qkv(1000, (1, 4, 2), (100, 100), (64, 64));
    let opts = on_path(
        KernelPath::Auto,
        AttentionOptions {
            causal: true,
            ..Default::default()
        },
    );
    check_against_reference("auto", &q, &k, &v, &opts);
}

#[test]
fn long_key_loops_stay_exact() {
    // Thousands of keys per workgroup: beyond what some software drivers let one
    // invocation loop over, so such adapters split the keys into merged ranges; every
    // option must survive the merge.
    let (q, k, v) = qkv(1100, (2, 2, 1), (40, 7000), (64, 32));
    let every = EveryOption::new(1110, 40, 7000);
    let keep = bool_mask(1101, &[40, 7000], 0.8);
    let mut cases = every.cases();
    cases.push((
        "bottom-right causal, bool mask",
        AttentionOptions {
            mask: Some(Mask::Bool(keep.view())),
            ..bottom_right_causal()
        },
    ));
    for (what, opts) in cases {
        check_against_reference(what, &q, &k, &v, &fused(opts));
    }
}

#[test]
fn web_default_limits_still_fit_every_head_dim() {
    // WebGPU's default limits (16 KiB of workgroup memory, 256 invocations), as a browser
    // gives them: smaller tiles serve the large head dims.
    let c = context_with_limits(|_| wgpu::Limits::default());
    for (n, &(d, dv)) in [(256, 256), (128, 64), (64, 256)].iter().enumerate() {
        let (q, k, v) = qkv(2200 + n as u64, (1, 4, 2), (70, 90), (d, dv));
        let opts = fused(AttentionOptions {
            causal: true,
            return_lse: true,
            ..Default::default()
        });
        check_against_reference_on(&c, &format!("D {d} Dv {dv}"), &q, &k, &v, &opts);
    }
}
