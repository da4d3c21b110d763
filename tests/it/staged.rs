//! The staged (three-kernel) GPU path against the CPU reference, option by option, at
//! shapes that straddle the kernels' 32-wide tiles. Outputs are pre-filled with NaN.

use crate::common::*;
use ndarray::{s, Array, Array4, IxDyn};
use wgpu_attention::{Alignment, AttentionOptions, KernelPath, Mask, Window};

fn staged<'a>() -> AttentionOptions<'a> {
    AttentionOptions {
        path: KernelPath::Staged,
        return_weights: true,
        return_lse: true,
        ..Default::default()
    }
}

#[test]
fn tile_edge_shapes() {
    let mut seed = 0;
    for l in [1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129] {
        for d in [1, 16, 17, 64] {
            seed += 1;
            let (q, k, v) = qkv(seed, (1, 2, 2), (l, l), (d, d));
            check_against_reference(&format!("L={l} D={d}"), &q, &k, &v, &staged());
        }
    }
}

#[test]
fn cross_attention_and_value_width() {
    for (lq, lk, d, dv) in [
        (1, 1000, 64, 64),
        (7, 65, 64, 24),
        (129, 17, 16, 65),
        (33, 1, 8, 3),
    ] {
        let (q, k, v) = qkv(lq as u64, (2, 2, 2), (lq, lk), (d, dv));
        check_against_reference(
            &format!("Lq={lq} Lk={lk} D={d} Dv={dv}"),
            &q,
            &k,
            &v,
            &staged(),
        );
    }
}

#[test]
fn grouped_and_multi_query_heads() {
    for (hq, hkv) in [(8, 2), (6, 3), (4, 1), (5, 5)] {
        let (q, k, v) = qkv(
            hq as u64 * 10 + hkv as u64,
            (2, hq, hkv),
            (17, 33),
            (16, 16),
        );
        let opts = AttentionOptions {
            causal: true,
            ..staged()
        };
        check_against_reference(&format!("Hq={hq} Hkv={hkv}"), &q, &k, &v, &opts);
    }
}

#[test]
fn causal_alignments_and_windows() {
    let shapes = [(16, 16), (20, 48), (48, 20), (1, 64)];
    for (lq, lk) in shapes {
        let (q, k, v) = qkv(lq as u64 + lk as u64, (1, 2, 1), (lq, lk), (32, 32));
        for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
            for causal in [false, true] {
                for window in [
                    None,
                    Some(Window::new(5, 3)),
                    Some(Window::new(0, 0)),
                    Some(Window {
                        left: None,
                        right: Some(2),
                    }),
                ] {
                    let opts = AttentionOptions {
                        causal,
                        alignment,
                        window,
                        ..staged()
                    };
                    let what =
                        format!("Lq={lq} Lk={lk} {alignment:?} causal={causal} window={window:?}");
                    check_against_reference(&what, &q, &k, &v, &opts);
                }
            }
        }
    }
}

#[test]
fn boolean_masks_of_every_rank() {
    let (b, h, lq, lk) = (2, 3, 17, 33);
    let (q, k, v) = qkv(7, (b, h, 3), (lq, lk), (16, 16));
    let mut rng = Rng::new(99);
    for shape in [
        vec![lq, lk],
        vec![1, lk],
        vec![lq, 1],
        vec![h, lq, lk],
        vec![b, 1, lq, lk],
        vec![b, h, lq, lk],
        vec![1, 1, 1, lk],
    ] {
        let mask = rng.bool_mask(&shape, 0.6);
        let opts = AttentionOptions {
            mask: Some(Mask::Bool(mask.view())),
            ..staged()
        };
        check_against_reference(&format!("bool mask {shape:?}"), &q, &k, &v, &opts);
    }
}

#[test]
fn additive_masks_with_negative_infinity() {
    let (b, h, lq, lk) = (2, 2, 16, 40);
    let (q, k, v) = qkv(8, (b, h, 2), (lq, lk), (16, 16));
    let mut rng = Rng::new(5);
    for shape in [vec![lq, lk], vec![b, 1, lq, lk], vec![h, 1, lk]] {
        let mask = rng.additive_mask(&shape, 0.3);
        let opts = AttentionOptions {
            mask: Some(Mask::Additive(mask.view())),
            causal: true,
            ..staged()
        };
        check_against_reference(&format!("additive mask {shape:?}"), &q, &k, &v, &opts);
    }
}

#[test]
fn key_lengths_and_scale() {
    let (q, k, v) = qkv(9, (3, 2, 2), (17, 31), (16, 16));
    let lens = [31, 9, 0];
    let opts = AttentionOptions {
        kv_lens: Some(&lens),
        scale: Some(0.3),
        ..staged()
    };
    check_against_reference("kv_lens [31, 9, 0], scale 0.3", &q, &k, &v, &opts);
    let opts = AttentionOptions {
        kv_lens: Some(&lens),
        causal: true,
        alignment: Alignment::BottomRight,
        ..staged()
    };
    check_against_reference("kv_lens, causal bottom-right", &q, &k, &v, &opts);
}

#[test]
fn head_dim_128_and_long_sequence() {
    let opts = AttentionOptions {
        causal: true,
        ..staged()
    };
    let (q, k, v) = qkv(10, (1, 2, 1), (129, 129), (128, 128));
    check_against_reference("D=128", &q, &k, &v, &opts);
    let (q, k, v) = qkv(11, (1, 1, 1), (2048, 2048), (32, 32));
    check_against_reference("L=2048", &q, &k, &v, &opts);
}

#[test]
fn fully_masked_rows_are_zero_with_negative_infinite_lse() {
    let (q, k, v) = qkv(12, (1, 1, 1), (4, 6), (8, 8));
    // Row 1 allows nothing; the others allow some keys.
    let mask = ndarray::arr2(&[
        [true, false, true, false, false, false],
        [false; 6],
        [true; 6],
        [false, false, false, false, false, true],
    ])
    .into_dyn();
    let opts = AttentionOptions {
        mask: Some(Mask::Bool(mask.view())),
        ..staged()
    };
    let gpu = check_against_reference("fully masked row", &q, &k, &v, &opts);
    assert!(gpu.out.slice(s![0, 0, 1, ..]).iter().all(|&x| x == 0.0));
    assert!(gpu
        .weights
        .as_ref()
        .unwrap()
        .slice(s![0, 0, 1, ..])
        .iter()
        .all(|&x| x == 0.0));
    assert_eq!(gpu.lse.as_ref().unwrap()[[0, 0, 1]], f32::NEG_INFINITY);
    // Key length 0 and an all -inf additive row mask everything too.
    let lens = [0];
    check_against_reference(
        "kv_len 0",
        &q,
        &k,
        &v,
        &AttentionOptions {
            kv_lens: Some(&lens),
            ..staged()
        },
    );
    let bias = Array::from_elem(IxDyn(&[4, 6]), f32::NEG_INFINITY);
    let opts = AttentionOptions {
        mask: Some(Mask::Additive(bias.view())),
        ..staged()
    };
    let gpu = gpu_nan_prefilled(&q, &k, &v, &opts).unwrap();
    assert!(
        gpu.out.iter().all(|&x| x == 0.0),
        "all -inf bias must give zeros, not NaN"
    );
}

#[test]
fn nan_propagates_only_where_it_touches() {
    let (mut q, k, mut v) = qkv(13, (1, 2, 1), (5, 7), (8, 8));
    q[[0, 0, 2, 3]] = f32::NAN; // poisons row 2 of head 0 only
    v[[0, 0, 6, 1]] = f32::NAN; // key 6: causal rows below 6 never see it
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::TopLeft,
        ..staged()
    };
    let gpu = check_against_reference("NaN in q and v", &q, &k, &v, &opts);
    assert!(gpu.out.slice(s![0, 0, 2, ..]).iter().all(|x| x.is_nan()));
    assert!(gpu.lse.as_ref().unwrap()[[0, 0, 2]].is_nan());
    assert!(gpu.out.slice(s![0, 1, 2, ..]).iter().all(|x| x.is_finite()));
    assert!(
        gpu.out
            .slice(s![0, .., 4, ..])
            .iter()
            .all(|x| x.is_finite()),
        "masked NaN in V leaked"
    );
    // Bottom-right with Lq < Lk: every row sees key 6, so column 1 is NaN in every row.
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        ..staged()
    };
    check_against_reference("NaN in v, bottom-right", &q, &k, &v, &opts);
}

#[test]
fn large_logits_do_not_overflow() {
    let (q, k, v) = qkv(14, (1, 2, 2), (17, 17), (4, 4));
    let opts = AttentionOptions {
        scale: Some(2500.0),
        ..staged()
    };
    check_against_reference("logits near ±1e4", &q, &k, &v, &opts);
}

#[test]
fn outputs_not_requested_are_not_returned() {
    let (q, k, v) = qkv(15, (1, 2, 2), (9, 9), (8, 8));
    let opts = AttentionOptions {
        path: KernelPath::Staged,
        ..Default::default()
    };
    check_against_reference("out only", &q, &k, &v, &opts);
    let opts = AttentionOptions {
        return_lse: true,
        ..Default::default()
    };
    check_against_reference("auto path with lse", &q, &k, &v, &opts);
}

#[test]
fn one_hot_query_picks_one_value_row_exactly() {
    // Integer-valued inputs where the arithmetic is exact: a huge logit for one key puts
    // weight 1.0 there and exactly 0 elsewhere.
    let (b, h, l, d) = (1, 1, 8, 8);
    let q = Array4::from_shape_fn(
        (b, h, l, d),
        |(_, _, i, e)| if i == e { 100.0 } else { 0.0 },
    );
    let k = q.clone();
    let v = Array4::from_shape_fn((b, h, l, d), |(_, _, j, e)| (j * 10 + e) as f32);
    let opts = AttentionOptions {
        scale: Some(1.0),
        ..staged()
    };
    let gpu = gpu_nan_prefilled(&q, &k, &v, &opts).unwrap();
    assert_eq!(gpu.out, v);
}
