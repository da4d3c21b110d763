//! The fast CPU path (`attention_cpu`) against the float64 reference at the edges of its
//! own blocks (128 query rows, 256 keys, 4 rows where the products become matrix
//! products), with every option; every GPU check in the other modules runs it too
//! (`common::check_against_reference`).

use ndarray::{s, Array, Array4, IxDyn};
use wgpu_attention::*;

use crate::common::*;

/// Checks `opts` with and without weights and lse.
fn check(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    for (weights, lse) in [(true, true), (false, true), (false, false)] {
        let opts = AttentionOptions {
            return_weights: weights,
            return_lse: lse,
            ..opts.clone()
        };
        let want = attention_reference(q.view(), k.view(), v.view(), &opts)
            .unwrap_or_else(|e| panic!("{what}: reference: {e}"));
        check_fast_cpu(
            &format!("{what}, weights {weights}, lse {lse}"),
            q,
            k,
            v,
            &opts,
            &want,
        );
    }
}

#[test]
fn shapes_straddling_the_blocks() {
    let mut seed = 200;
    for (lq, lk) in [
        (1, 1),
        (3, 255),
        (4, 256),
        (5, 257),
        (63, 17),
        (64, 513),
        (65, 300),
        (127, 31),
        (128, 257),
        (131, 260),
        (129, 64),
    ] {
        for causal in [false, true] {
            seed += 1;
            let (q, k, v) = qkv(seed, (2, 4, 2), (lq, lk), (24, 40));
            for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
                let opts = AttentionOptions {
                    causal,
                    alignment,
                    ..Default::default()
                };
                check(
                    &format!("{lq}x{lk} causal {causal} {alignment:?}"),
                    &q,
                    &k,
                    &v,
                    &opts,
                );
            }
        }
    }
}

#[test]
fn windows_key_lengths_and_scales() {
    let (q, k, v) = qkv(220, (2, 6, 3), (70, 300), (16, 16));
    let lens = [300u32, 37];
    for window in [
        Window::new(10, 0),
        Window::new(0, 5),
        Window {
            left: None,
            right: Some(1),
        },
        Window::new(400, 400),
    ] {
        for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
            let opts = AttentionOptions {
                window: Some(window),
                alignment,
                kv_lens: Some(&lens),
                scale: Some(0.7),
                ..Default::default()
            };
            check(&format!("{window:?} {alignment:?}"), &q, &k, &v, &opts);
        }
    }
    // Bottom-right alignment with more queries than keys leaves the first rows empty.
    let (q, k, v) = qkv(221, (1, 2, 2), (80, 9), (8, 8));
    check("Lq > Lk bottom-right", &q, &k, &v, &bottom_right_causal());
    let opts = AttentionOptions {
        scale: Some(0.0),
        ..Default::default()
    };
    check("scale 0", &q, &k, &v, &opts);
}

#[test]
fn masks_of_both_kinds_and_every_broadcast() {
    let (b, hq, lq, lk) = (2, 4, 66, 260);
    let (q, k, v) = qkv(230, (b, hq, 2), (lq, lk), (8, 12));
    let shapes: [&[usize]; 5] = [
        &[lq, lk],
        &[1, lk],
        &[hq, 1, lk],
        &[b, 1, lq, lk],
        &[b, hq, lq, lk],
    ];
    for (n, shape) in shapes.iter().enumerate() {
        let keep = bool_mask(231 + n as u64, shape, 0.6);
        let bias = additive_mask(241 + n as u64, shape, 0.3);
        for causal in [false, true] {
            let opts = AttentionOptions {
                causal,
                mask: Some(Mask::Bool(keep.view())),
                ..Default::default()
            };
            check(
                &format!("bool {shape:?} causal {causal}"),
                &q,
                &k,
                &v,
                &opts,
            );
            let opts = AttentionOptions {
                causal,
                mask: Some(Mask::Additive(bias.view())),
                ..Default::default()
            };
            check(
                &format!("additive {shape:?} causal {causal}"),
                &q,
                &k,
                &v,
                &opts,
            );
        }
    }
}

#[test]
fn fully_masked_rows_are_zero_with_lse_minus_infinity() {
    let (q, k, v) = qkv(250, (1, 2, 1), (70, 300), (8, 8));
    let mut keep = Array::from_elem(IxDyn(&[70, 300]), true);
    keep.slice_mut(s![3, ..]).fill(false);
    keep.slice_mut(s![64..70, ..]).fill(false);
    let opts = AttentionOptions {
        mask: Some(Mask::Bool(keep.view())),
        return_weights: true,
        return_lse: true,
        ..Default::default()
    };
    let got = attention_cpu(q.view(), k.view(), v.view(), &opts).unwrap();
    let (w, lse) = (got.weights.as_ref().unwrap(), got.lse.as_ref().unwrap());
    for h in 0..2 {
        for i in [3, 64, 65, 69] {
            assert!(
                got.out.slice(s![0, h, i, ..]).iter().all(|&x| x == 0.0),
                "row {i}"
            );
            assert!(
                w.slice(s![0, h, i, ..]).iter().all(|&x| x == 0.0),
                "row {i}"
            );
            assert_eq!(lse[[0, h, i]], f32::NEG_INFINITY, "row {i}");
        }
    }
    check("fully masked rows", &q, &k, &v, &opts);
}

/// NaN and infinities in q, k and v, in blocks that take the matrix products and in
/// ones that take the loops (few rows, or a value row that is not finite).
#[test]
fn non_finite_inputs_follow_the_reference() {
    for lq in [2, 9, 70] {
        let (mut q, mut k, mut v) = qkv(260 + lq as u64, (1, 2, 1), (lq, 300), (8, 8));
        q[[0, 0, 1, 0]] = f32::INFINITY;
        k[[0, 0, 280, 3]] = f32::NAN;
        v[[0, 0, 10, 2]] = f32::INFINITY;
        v[[0, 0, 290, 5]] = f32::NAN;
        for causal in [false, true] {
            let opts = AttentionOptions {
                causal,
                ..Default::default()
            };
            check(
                &format!("non-finite, Lq {lq}, causal {causal}"),
                &q,
                &k,
                &v,
                &opts,
            );
            // The same keys hidden by an additive -inf contribute nothing.
            let mut bias = Array::zeros(IxDyn(&[lq, 300]));
            bias.slice_mut(s![.., 280]).fill(f32::NEG_INFINITY);
            bias.slice_mut(s![.., 290]).fill(f32::NEG_INFINITY);
            bias.slice_mut(s![.., 10]).fill(f32::NEG_INFINITY);
            let opts = AttentionOptions {
                causal,
                mask: Some(Mask::Additive(bias.view())),
                ..Default::default()
            };
            check(
                &format!("hidden non-finite, Lq {lq}, causal {causal}"),
                &q,
                &k,
                &v,
                &opts,
            );
        }
    }
}

/// Views that are not row-major (transposed, strided) give the same result as their
/// row-major copies.
#[test]
fn non_contiguous_inputs() {
    let (q, k, v) = qkv(270, (2, 3, 3), (20, 70), (8, 8));
    let qt = q.clone().permuted_axes([0, 2, 1, 3]);
    let qt = qt
        .as_standard_layout()
        .to_owned()
        .permuted_axes([0, 2, 1, 3]);
    assert!(!qt.is_standard_layout());
    let k2 = Array4::from_shape_fn((2, 3, 140, 8), |(b, h, j, d)| {
        if j % 2 == 0 {
            k[[b, h, j / 2, d]]
        } else {
            f32::NAN
        }
    });
    let ks = k2.slice(s![.., .., ..;2, ..]);
    let opts = AttentionOptions {
        causal: true,
        return_lse: true,
        return_weights: true,
        ..Default::default()
    };
    let want = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    let got = attention_cpu(qt.view(), ks, v.view(), &opts).unwrap();
    assert_matches_reference("non-contiguous", &got, &want, &opts);
}

/// Large problems split over many blocks and threads give the reference's answer.
#[test]
fn many_blocks_over_threads() {
    let (q, k, v) = qkv(280, (2, 8, 2), (300, 600), (32, 16));
    check("300 x 600 GQA 8:2", &q, &k, &v, &bottom_right_causal());
}
