//! A query tensor larger than the largest storage binding (128 MiB on lavapipe and many
//! adapters) is split across dispatches and still matches the CPU reference.

use crate::common::*;
use ndarray::s;
use wgpu_attention::*;

#[test]
fn q_larger_than_one_binding_matches_the_reference() {
    let ctx = ctx();
    // B = 1, Hq = 1,040, L = 256, D = 128: Q is 130 MiB. Eight key/value heads of 32
    // keys keep the arithmetic small; the size that matters is Q's (and the output's).
    let (b, hq, hkv, lq, lk, d) = (1, 1_040, 8, 256, 32, 128);
    let q_bytes = (b * hq * lq * d * 4) as u64;
    let max_binding = ctx.limits().max_storage_buffer_binding_size;
    assert!(
        q_bytes > max_binding && q_bytes > 128 << 20,
        "Q ({q_bytes} bytes) must exceed one binding ({max_binding} bytes)"
    );
    let mut rng = Rng::new(21);
    let q = rng.array4((b, hq, lq, d));
    let k = rng.array4((b, hkv, lk, d));
    let v = rng.array4((b, hkv, lk, d));
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        return_lse: true,
        ..Default::default()
    };
    let plan = staged_plan_for_tests(ctx, q.shape(), k.shape(), v.shape(), &opts).unwrap();
    assert!(plan.len() >= 2, "expected a split, got {plan:?}");
    // Outputs start as NaN: an element no chunk writes fails below.
    let gpu = gpu_nan_prefilled_on(ctx, &q, &k, &v, &opts).unwrap();
    let unwritten = gpu.out.iter().filter(|x| x.is_nan()).count();
    assert_eq!(unwritten, 0, "output elements never written");
    // The reference for a sample of heads: both ends, a group edge, and both sides of
    // every chunk boundary.
    let group = hq / hkv;
    let mut heads = vec![0, 1, group - 1, group, hq - 1];
    for &(start, _, _, _) in &plan[1..] {
        heads.extend([start - 1, start]);
    }
    for h in heads {
        let g = h / group;
        let one = |a: &ndarray::Array4<f32>, i: usize| a.slice(s![.., i..i + 1, .., ..]).to_owned();
        let (qh, kh, vh) = (one(&q, h), one(&k, g), one(&v, g));
        let cpu = attention_reference(qh.view(), kh.view(), vh.view(), &opts).unwrap();
        let got_out = gpu.out.slice(s![.., h..h + 1, .., ..]);
        assert_close(
            &format!("out head {h}"),
            got_out,
            cpu.out.view(),
            ATOL,
            RTOL,
        );
        let got_lse = gpu
            .lse
            .as_ref()
            .unwrap()
            .slice(s![.., h..h + 1, ..])
            .to_owned();
        assert_close(
            &format!("lse head {h}"),
            got_lse.view(),
            cpu.lse.as_ref().unwrap().view(),
            ATOL,
            RTOL,
        );
    }
}
