//! Numerical edges: logits far from zero, -inf in additive masks, infinities and NaN in
//! the inputs, and head dimensions up to 256 and beyond.

use crate::common::*;
use ndarray::{s, Array, Array4, IxDyn};
use wgpu_attention::*;

/// Checks `opts` against the reference as given, then on the fused and decode kernels
/// (weights, when asked, from their log-sum-exp), which must meet the same edges.
fn check_every_path(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    check_against_reference(what, q, k, v, opts);
    for path in [KernelPath::Fused, KernelPath::Decode] {
        let opts = AttentionOptions {
            path,
            ..opts.clone()
        };
        check_against_reference(&format!("{what}, {path:?}"), q, k, v, &opts);
    }
}

fn all_outputs<'a>() -> AttentionOptions<'a> {
    AttentionOptions {
        return_weights: true,
        return_lse: true,
        ..Default::default()
    }
}

#[test]
fn logits_of_plus_and_minus_ten_thousand_do_not_overflow() {
    // D = 1, q = 100, k = ±100, scale 1: every logit is exactly +1e4 or -1e4.
    let (lq, lk) = (6, 9);
    let q = Array4::from_elem((1, 1, lq, 1), 100.0f32);
    let k = Array4::from_shape_fn(
        (1, 1, lk, 1),
        |(_, _, j, _)| {
            if j % 3 == 0 {
                100.0
            } else {
                -100.0
            }
        },
    );
    let v = Array4::from_shape_fn((1, 1, lk, 2), |(_, _, j, e)| (j * 2 + e) as f32);
    let opts = AttentionOptions {
        scale: Some(1.0),
        ..all_outputs()
    };
    let gpu = gpu_nan_prefilled(&q, &k, &v, &opts).unwrap();
    let lse = gpu.lse.as_ref().unwrap();
    let weights = gpu.weights.as_ref().unwrap();
    for i in 0..lq {
        // Three keys at +1e4 share the weight; e^-2e4 underflows to exactly 0.
        let want_lse = 1e4 + 3f32.ln();
        assert!(
            (lse[[0, 0, i]] - want_lse).abs() <= 1e4 * 1e-6,
            "row {i}: lse {} vs {want_lse}",
            lse[[0, 0, i]]
        );
        for j in 0..lk {
            let w = weights[[0, 0, i, j]];
            let want = if j % 3 == 0 { 1.0 / 3.0 } else { 0.0 };
            assert!((w - want).abs() < 1e-6, "row {i} key {j}: weight {w}");
        }
    }
    check_every_path("±1e4 logits", &q, &k, &v, &opts);
    // The same through a large scale and random inputs, and with additive ±1e4 biases.
    let mut rng = Rng::new(51);
    let (q, k, v) = (
        rng.array4((2, 2, 13, 8)),
        rng.array4((2, 2, 21, 8)),
        rng.array4((2, 2, 21, 8)),
    );
    let opts = AttentionOptions {
        scale: Some(3_000.0),
        ..all_outputs()
    };
    check_every_path("scale 3000", &q, &k, &v, &opts);
    // Biases of ±1e4 on zero scores: the logits are the biases, exact in f32. (With
    // random scores, 1e4 + x rounds to f32's 1e-3 spacing near 1e4: an input
    // precision limit of any f32 implementation, not an overflow.)
    let q = Array4::<f32>::zeros((2, 2, 13, 8));
    let bias = Array::from_shape_fn(IxDyn(&[13, 21]), |ix| match (ix[0] + ix[1]) % 5 {
        0 => 1e4f32,
        1 => 1e4 - 1.0,
        2 => -1e4,
        3 => f32::NEG_INFINITY,
        _ => 0.0,
    });
    let opts = AttentionOptions {
        mask: Some(Mask::Additive(bias.view())),
        ..all_outputs()
    };
    check_every_path("±1e4 and -inf biases", &q, &k, &v, &opts);
}

#[test]
fn logits_near_the_top_of_the_f32_range_stay_finite() {
    let mut rng = Rng::new(52);
    let (q, k, v) = (
        rng.array4((1, 2, 7, 4)),
        rng.array4((1, 2, 7, 4)),
        rng.array4((1, 2, 7, 4)),
    );
    let opts = AttentionOptions {
        scale: Some(1e30),
        causal: true,
        ..all_outputs()
    };
    let gpu = gpu_nan_prefilled(&q, &k, &v, &opts).unwrap();
    assert!(gpu.out.iter().all(|x| x.is_finite()), "{:?}", gpu.out);
    check_every_path("logits ~1e30", &q, &k, &v, &opts);
}

#[test]
fn negative_infinity_in_additive_masks() {
    let mut rng = Rng::new(53);
    let (b, h, lq, lk) = (2, 3, 9, 11);
    let (q, k, v) = (
        rng.array4((b, h, lq, 8)),
        rng.array4((b, h, lk, 8)),
        rng.array4((b, h, lk, 8)),
    );
    // Random -inf, a whole row of -inf (batch 0, head 1, row 4) and a whole head of
    // -inf (batch 1, head 2).
    let mut bias = Array::from_shape_simple_fn(IxDyn(&[b, h, lq, lk]), || {
        if rng.uniform() < 0.3 {
            f32::NEG_INFINITY
        } else {
            rng.normal()
        }
    });
    bias.slice_mut(s![0, 1, 4, ..]).fill(f32::NEG_INFINITY);
    bias.slice_mut(s![1, 2, .., ..]).fill(f32::NEG_INFINITY);
    let opts = AttentionOptions {
        mask: Some(Mask::Additive(bias.view())),
        ..all_outputs()
    };
    let gpu = gpu_nan_prefilled(&q, &k, &v, &opts).unwrap();
    let (weights, lse) = (gpu.weights.as_ref().unwrap(), gpu.lse.as_ref().unwrap());
    for (bb, hh, rows) in [(0, 1, 4..5), (1, 2, 0..lq)] {
        for i in rows {
            assert!(gpu.out.slice(s![bb, hh, i, ..]).iter().all(|&x| x == 0.0));
            assert!(weights.slice(s![bb, hh, i, ..]).iter().all(|&x| x == 0.0));
            assert_eq!(lse[[bb, hh, i]], f32::NEG_INFINITY, "({bb}, {hh}, {i})");
        }
    }
    assert!(gpu.out.iter().all(|x| x.is_finite()), "no NaN from masking");
    check_every_path("random -inf bias", &q, &k, &v, &opts);
    // -inf where a boolean mask or causality already masks changes nothing.
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        mask: Some(Mask::Additive(bias.view())),
        ..all_outputs()
    };
    check_every_path("-inf bias and causal", &q, &k, &v, &opts);
}

#[test]
fn infinities_and_nan_in_inputs_follow_the_reference() {
    let mut rng = Rng::new(54);
    let (mut q, mut k, mut v) = (
        rng.array4((1, 2, 6, 4)),
        rng.array4((1, 2, 8, 4)),
        rng.array4((1, 2, 8, 4)),
    );
    q[[0, 0, 1, 0]] = f32::INFINITY; // a +inf logit or two: row 1 becomes NaN
    q[[0, 1, 3, 2]] = f32::NEG_INFINITY; // -inf and +inf logits
    k[[0, 1, 5, 1]] = f32::NAN; // key 5 of head 1: NaN logits for every row
    v[[0, 0, 2, 3]] = f32::INFINITY; // inf flows into column 3 of head 0
    for causal in [false, true] {
        let opts = AttentionOptions {
            causal,
            ..all_outputs()
        };
        check_every_path(&format!("inf/NaN, causal {causal}"), &q, &k, &v, &opts);
    }
    // A row whose only allowed logits are -inf is an empty row: zeros, lse -inf.
    let q = Array4::from_elem((1, 1, 2, 1), f32::NEG_INFINITY);
    let k = Array4::from_elem((1, 1, 3, 1), 1.0f32);
    let v = Array4::from_elem((1, 1, 3, 2), 5.0f32);
    let gpu = gpu_nan_prefilled(&q, &k, &v, &all_outputs()).unwrap();
    assert!(gpu.out.iter().all(|&x| x == 0.0), "{:?}", gpu.out);
    assert!(gpu.lse.unwrap().iter().all(|&x| x == f32::NEG_INFINITY));
    check_every_path("all -inf logits", &q, &k, &v, &all_outputs());
}

#[test]
fn head_dims_up_to_256_and_beyond() {
    let mut seed = 60;
    for (d, dv) in [(255, 255), (256, 256), (256, 64), (64, 256), (257, 129)] {
        seed += 1;
        let mut rng = Rng::new(seed);
        let (q, k, v) = (
            rng.array4((1, 2, 17, d)),
            rng.array4((1, 1, 33, d)),
            rng.array4((1, 1, 33, dv)),
        );
        let opts = AttentionOptions {
            causal: true,
            ..all_outputs()
        };
        // The fused and decode kernels stop at 256 (and say so, see fused.rs and decode.rs).
        if d.max(dv) <= 256 {
            check_every_path(&format!("D={d} Dv={dv}"), &q, &k, &v, &opts);
        } else {
            check_against_reference(&format!("D={d} Dv={dv}"), &q, &k, &v, &opts);
        }
    }
    // The staged kernels loop over D and Dv in tiles: no limit below what the binding
    // sizes allow.
    let mut rng = Rng::new(70);
    let (q, k, v) = (
        rng.array4((1, 1, 5, 1_500)),
        rng.array4((1, 1, 6, 1_500)),
        rng.array4((1, 1, 6, 2_000)),
    );
    check_against_reference("D=1500 Dv=2000", &q, &k, &v, &all_outputs());
}

#[test]
fn empty_batch_and_empty_dimensions_are_rejected() {
    let z = |s| Array4::<f32>::zeros(s);
    let cases = [
        ((0, 2, 3, 4), (0, 2, 3, 4), "q", "[0, 2, 3, 4]"),
        ((1, 0, 3, 4), (1, 1, 3, 4), "q", "[1, 0, 3, 4]"),
        ((1, 2, 3, 0), (1, 2, 3, 0), "q", "[1, 2, 3, 0]"),
        ((1, 2, 3, 4), (1, 2, 0, 4), "k", "[1, 2, 0, 4]"),
    ];
    for (qs, ks, arg, shape) in cases {
        let (q, k) = (z(qs), z(ks));
        for r in [
            attention(ctx(), q.view(), k.view(), k.view(), &Default::default()),
            attention_reference(q.view(), k.view(), k.view(), &Default::default()),
            attention_cpu(q.view(), k.view(), k.view(), &Default::default()),
        ] {
            match r {
                Err(AttentionError::Shape { arg: a, detail }) if a == arg => {
                    assert!(detail.contains("zero-size dimension"), "{detail}");
                    assert!(detail.contains(shape), "{detail}");
                }
                other => panic!("q {qs:?} k {ks:?}: expected Shape for {arg}, got {other:?}"),
            }
        }
    }
}

/// The mask rule: an additive -inf masks a key exactly as a boolean false does, so NaN
/// or inf in K or V at that key contributes nothing, on every path; the result is
/// bit for bit that of the boolean mask when the other bias values are 0.
#[test]
fn additive_minus_inf_masks_non_finite_keys_like_a_boolean_mask() {
    let mut rng = Rng::new(57);
    let (b, h, lq, lk) = (1, 2, 6, 40);
    let (q, mut k, mut v) = (
        rng.array4((b, h, lq, 8)),
        rng.array4((b, h, lk, 8)),
        rng.array4((b, h, lk, 8)),
    );
    let hidden = [3, 17, 39];
    for &j in &hidden {
        k[[0, 0, j, 2]] = f32::NAN;
        k[[0, 1, j, 0]] = f32::INFINITY;
        v[[0, 0, j, 1]] = f32::NAN;
        v[[0, 1, j, 5]] = f32::NEG_INFINITY;
    }
    let keep = Array::from_shape_fn(IxDyn(&[lq, lk]), |ix| !hidden.contains(&ix[1]));
    let bias = keep.mapv(|k| if k { 0.0f32 } else { f32::NEG_INFINITY });
    let additive = AttentionOptions {
        mask: Some(Mask::Additive(bias.view())),
        ..all_outputs()
    };
    let boolean = AttentionOptions {
        mask: Some(Mask::Bool(keep.view())),
        ..all_outputs()
    };
    let cpu = attention_reference(q.view(), k.view(), v.view(), &additive).unwrap();
    assert!(
        cpu.out.iter().all(|x| x.is_finite()),
        "reference: {:?}",
        cpu.out
    );
    assert_eq!(
        cpu,
        attention_reference(q.view(), k.view(), v.view(), &boolean).unwrap()
    );
    check_every_path("-inf bias over NaN keys", &q, &k, &v, &additive);
    let fast = |o: &AttentionOptions<'_>| attention_cpu(q.view(), k.view(), v.view(), o).unwrap();
    let (a, bo) = (fast(&additive), fast(&boolean));
    assert!(a.out.iter().all(|x| x.is_finite()), "fast cpu: {:?}", a.out);
    assert_eq!(output_bits(&a), output_bits(&bo), "fast cpu");
    let f16 = ctx().features().contains(wgpu::Features::SHADER_F16);
    let mut runs = vec![(KernelPath::Staged, Precision::F32)];
    for path in [KernelPath::Fused, KernelPath::Decode] {
        runs.push((path, Precision::F32));
        if f16 {
            runs.push((path, Precision::F16));
        }
    }
    for (path, precision) in runs {
        let with = |o: &AttentionOptions<'_>| {
            let opts = AttentionOptions {
                path,
                precision,
                return_weights: true,
                ..o.clone()
            };
            attention(ctx(), q.view(), k.view(), v.view(), &opts).unwrap()
        };
        let (a, bo) = (with(&additive), with(&boolean));
        let what = format!("{path:?} {precision:?}");
        assert!(a.out.iter().all(|x| x.is_finite()), "{what}: {:?}", a.out);
        assert_eq!(output_bits(&a), output_bits(&bo), "{what}");
    }
}

/// +inf or NaN cannot be a bias on a logit: a typed error naming the mask on both
/// backends, before any work.
#[test]
fn plus_infinity_or_nan_in_an_additive_mask_is_refused() {
    let q = Array4::<f32>::zeros((1, 1, 2, 4));
    for bad in [f32::INFINITY, f32::NAN] {
        let mut bias = Array::zeros(IxDyn(&[2, 2]));
        bias[[1, 0]] = bad;
        let opts = AttentionOptions {
            mask: Some(Mask::Additive(bias.view())),
            ..Default::default()
        };
        for e in [
            attention_reference(q.view(), q.view(), q.view(), &opts).unwrap_err(),
            attention_cpu(q.view(), q.view(), q.view(), &opts).unwrap_err(),
            attention(ctx(), q.view(), q.view(), q.view(), &opts).unwrap_err(),
        ] {
            assert!(
                matches!(e, AttentionError::InvalidOption { arg: "mask", .. }),
                "{bad}: {e}"
            );
        }
    }
}

/// A plain f32 computation of the formula (max-subtracted softmax, f32 sums), the
/// baseline of FlashAttention's accuracy criterion. No mask; returns out, weights, lse.
fn plain_f32(q: &Array4<f32>, k: &Array4<f32>, v: &Array4<f32>) -> AttentionOutput {
    let (b, h, lq, d) = q.dim();
    let (lk, dv) = (k.dim().2, v.dim().3);
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = Array4::<f32>::zeros((b, h, lq, dv));
    let mut weights = Array4::<f32>::zeros((b, h, lq, lk));
    let mut lse = ndarray::Array3::<f32>::zeros((b, h, lq));
    for (bb, hh, i) in every_row(b, h, lq) {
        let logits: Vec<f32> = (0..lk)
            .map(|j| {
                scale
                    * (0..d)
                        .map(|e| q[[bb, hh, i, e]] * k[[bb, hh, j, e]])
                        .sum::<f32>()
            })
            .collect();
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let p: Vec<f32> = logits.iter().map(|x| (x - m).exp()).collect();
        let sum: f32 = p.iter().sum();
        lse[[bb, hh, i]] = m + sum.ln();
        for j in 0..lk {
            weights[[bb, hh, i, j]] = p[j] / sum;
            for e in 0..dv {
                out[[bb, hh, i, e]] += p[j] / sum * v[[bb, hh, j, e]];
            }
        }
    }
    AttentionOutput {
        out,
        weights: Some(weights),
        lse: Some(lse),
    }
}

fn every_row(b: usize, h: usize, l: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..b).flat_map(move |bb| (0..h).flat_map(move |hh| (0..l).map(move |i| (bb, hh, i))))
}

fn max_abs_diff<D: ndarray::Dimension>(a: &Array<f32, D>, b: &Array<f32, D>) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m, e| if e.is_nan() { f32::NAN } else { m.max(e) })
}

/// The README's accuracy statement, second half: where logits are large (q and k of
/// standard deviation 12, D = 64: logits of standard deviation near 150), every path's
/// largest error against the float64 reference is at most twice that of a plain f32
/// computation of the same formula (FlashAttention's criterion).
#[test]
fn large_logits_meet_flash_attentions_criterion() {
    let mut rng = Rng::new(58);
    let (b, h, lq, lk, d) = (1, 2, 33, 70, 64);
    let big = |rng: &mut Rng, s| rng.array4(s).mapv(|x| 12.0 * x);
    let (q, k, v) = (
        big(&mut rng, (b, h, lq, d)),
        big(&mut rng, (b, h, lk, d)),
        rng.array4((b, h, lk, d)),
    );
    let logit_std = {
        let n = (lq * lk * h) as f64;
        let mut s2 = 0.0;
        for (bb, hh, i) in every_row(b, h, lq) {
            for j in 0..lk {
                let x: f64 = (0..d)
                    .map(|e| f64::from(q[[bb, hh, i, e]]) * f64::from(k[[bb, hh, j, e]]))
                    .sum::<f64>()
                    / 8.0;
                s2 += x * x;
            }
        }
        (s2 / n).sqrt()
    };
    assert!((100.0..200.0).contains(&logit_std), "logit std {logit_std}");
    let reference = attention_reference(q.view(), k.view(), v.view(), &all_outputs()).unwrap();
    let baseline = plain_f32(&q, &k, &v);
    let base_out = max_abs_diff(&baseline.out, &reference.out);
    let base_lse = max_abs_diff(
        baseline.lse.as_ref().unwrap(),
        reference.lse.as_ref().unwrap(),
    );
    let base_w = max_abs_diff(
        baseline.weights.as_ref().unwrap(),
        reference.weights.as_ref().unwrap(),
    );
    // A floor of a few f32 ulps of the outputs' scale, for a baseline that happens to be
    // nearly exact.
    let floor = 1e-6;
    let runs = [
        (KernelPath::Staged, false),
        (KernelPath::Fused, false),
        (KernelPath::Decode, false),
        (KernelPath::Auto, true),
    ];
    for (path, fast_cpu) in runs {
        let path_name = match fast_cpu {
            true => "fast cpu".to_string(),
            false => format!("{path:?}"),
        };
        let opts = AttentionOptions {
            path,
            return_weights: true,
            return_lse: true,
            ..Default::default()
        };
        let gpu = match fast_cpu {
            true => attention_cpu(q.view(), k.view(), v.view(), &opts).unwrap(),
            false => gpu_nan_prefilled(&q, &k, &v, &opts).unwrap(),
        };
        let path = &path_name;
        let err = max_abs_diff(&gpu.out, &reference.out);
        assert!(
            err <= 2.0 * base_out + floor,
            "{path}: out error {err:e}, plain f32 {base_out:e}"
        );
        let err = max_abs_diff(gpu.lse.as_ref().unwrap(), reference.lse.as_ref().unwrap());
        assert!(
            err <= 2.0 * base_lse + floor * 150.0,
            "{path}: lse error {err:e}, plain f32 {base_lse:e}"
        );
        if let Some(w) = &gpu.weights {
            let err = max_abs_diff(w, reference.weights.as_ref().unwrap());
            assert!(
                err <= 2.0 * base_w + floor,
                "{path}: weights error {err:e}, plain f32 {base_w:e}"
            );
        }
    }
}
