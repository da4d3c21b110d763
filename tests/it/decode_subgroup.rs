//! The subgroup decode kernel (decode_subgroup.wgsl) forced on its own contexts, against
//! the CPU reference: every group width the adapter's subgroups allow (each takes its own
//! number of shuffle steps), long keys, grouped-query heads, every option, the row rules
//! and f16 storage. Widths the adapter cannot run, and adapters without subgroups, are
//! refused with `Unsupported`.

use crate::common::*;
use crate::paths::*;
use ndarray::s;
use wgpu_attention::*;

/// Lanes per key the tests force; 1 needs no shuffle for the dot product, the adapter's
/// subgroup size none for the merge of a subgroup's groups.
const WIDTHS: &[u32] = &[1, 2, 4, 8, 16, 32];

/// A context that runs the subgroup kernel for every decode call, with `d_split` lanes
/// per key (`None`: the first candidate that fits).
fn forced(d_split: Option<u32>) -> GpuContext {
    let c = GpuContext::new().expect("no GPU adapter");
    force_subgroup_decode_for_tests(&c, d_split);
    c
}

/// Whether the adapter has subgroups of at least `d_split` lanes (every size it reports).
fn runs(c: &GpuContext, d_split: u32) -> bool {
    c.features().contains(wgpu::Features::SUBGROUP) && c.adapter_info().subgroup_min_size >= d_split
}

fn decode(extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
    on_path(KernelPath::Decode, extra)
}

/// The widths this adapter runs, each on its own forced context; the others must be
/// refused as unsupported.
fn contexts() -> Vec<(u32, GpuContext)> {
    let (q, k, v) = qkv(4000, (1, 1, 1), (1, 64), (8, 8));
    let mut out = Vec::new();
    for &d in WIDTHS {
        let c = forced(Some(d));
        if runs(&c, d) {
            out.push((d, c));
        } else {
            let err = gpu_nan_prefilled_on(&c, &q, &k, &v, &decode(Default::default()))
                .expect_err("a width the subgroups cannot hold must be refused");
            assert!(matches!(err, AttentionError::Unsupported(_)), "{err}");
        }
    }
    out
}

#[test]
fn long_keys_grouped_heads_and_head_dims() {
    let c = forced(None);
    if !c.features().contains(wgpu::Features::SUBGROUP) {
        let (q, k, v) = qkv(4100, (1, 1, 1), (1, 64), (8, 8));
        let err = gpu_nan_prefilled_on(&c, &q, &k, &v, &decode(Default::default()))
            .expect_err("the subgroup kernel needs subgroups");
        assert!(matches!(err, AttentionError::Unsupported(_)), "{err}");
        return;
    }
    let cases = [
        // (batch, Hq, Hkv), (Lq, Lk), D
        ((1, 8, 1), (1, 4096), 64),
        ((1, 8, 2), (1, 33000), 64),
        ((2, 8, 2), (2, 4096), 128),
        ((1, 4, 4), (1, 2500), 256),
        ((1, 8, 2), (3, 1500), 1),
        ((1, 6, 3), (1, 1500), 3),
    ];
    for (n, &(heads, lengths, d)) in cases.iter().enumerate() {
        let (q, k, v) = qkv(4200 + n as u64, heads, lengths, (d, d));
        let what = format!("heads {heads:?} lengths {lengths:?} D {d}");
        check_against_reference_on(&c, &what, &q, &k, &v, &decode(bottom_right_causal()));
    }
}

#[test]
fn every_width_matches_the_reference() {
    for (d_split, c) in contexts() {
        for (n, &(lk, d, dv)) in [(1, 8, 8), (300, 20, 23), (2100, 64, 64), (700, 256, 256)]
            .iter()
            .enumerate()
        {
            // One lane cannot hold rows of 256 columns in its registers: that width is
            // refused there (see `narrow_groups_refuse_wide_heads`).
            if d_split == 1 && d == 256 {
                continue;
            }
            let (q, k, v) = qkv(4300 + n as u64, (2, 8, 2), (2, lk), (d, dv));
            let what = format!("d_split {d_split} Lk {lk} D {d} Dv {dv}");
            check_against_reference_on(&c, &what, &q, &k, &v, &decode(bottom_right_causal()));
        }
    }
}

#[test]
fn every_option_at_every_width() {
    let (q, k, v) = qkv(4400, (2, 6, 2), (3, 2000), (32, 16));
    let cases = EveryOption::new(4400, 3, 2000);
    for (d_split, c) in contexts() {
        for (what, opts) in &cases.cases() {
            let what = format!("d_split {d_split}: {what}");
            check_against_reference_on(&c, &what, &q, &k, &v, &decode(opts.clone()));
        }
    }
}

#[test]
fn row_rules_at_every_width() {
    let (mut q, mut k, mut v) = qkv(4500, (1, 2, 1), (2, 1800), (8, 8));
    // NaN in head 1's first query: that row is NaN.
    q[[0, 1, 0, 3]] = f32::NAN;
    // NaN in a key only the last row (position 1799) sees under bottom-right causal.
    k[[0, 0, 1799, 0]] = f32::NAN;
    // NaN and inf in V behind keys a bool mask hides: nothing leaks.
    v[[0, 0, 10, 1]] = f32::NAN;
    v[[0, 0, 1200, 2]] = f32::INFINITY;
    let mut keep = ndarray::Array2::from_elem((2, 1800), true);
    for j in [10, 1200] {
        keep[[0, j]] = false;
        keep[[1, j]] = false;
    }
    let keep = keep.into_dyn();
    let opts = decode(AttentionOptions {
        mask: Some(Mask::Bool(keep.view())),
        ..bottom_right_causal()
    });
    let lens = [0u32];
    let empty = decode(AttentionOptions {
        kv_lens: Some(&lens),
        ..Default::default()
    });
    for (d_split, c) in contexts() {
        let what = format!("d_split {d_split}: NaN rows and hidden NaN values");
        let gpu = check_against_reference_on(&c, &what, &q, &k, &v, &opts);
        let lse = gpu.lse.unwrap();
        assert!(
            gpu.out[[0, 1, 0, 0]].is_nan() && lse[[0, 1, 0]].is_nan(),
            "{what}"
        );
        assert!(
            gpu.out[[0, 0, 1, 0]].is_nan() && lse[[0, 0, 1]].is_nan(),
            "{what}"
        );
        assert!(
            gpu.out.slice(s![0, 0, 0, ..]).iter().all(|x| x.is_finite()),
            "{what}"
        );
        // Every key hidden: out 0, lse -inf.
        let gpu = gpu_nan_prefilled_on(&c, &q, &k, &v, &empty).expect("gpu");
        assert!(gpu.out.iter().all(|&x| x == 0.0), "d_split {d_split}");
        assert!(gpu.lse.unwrap().iter().all(|&x| x == f32::NEG_INFINITY));
    }
}

#[test]
fn f16_storage_within_bound() {
    let c = forced(None);
    let (q, k, v) = qkv(4600, (2, 8, 2), (1, 4096), (64, 64));
    let opts = decode(AttentionOptions {
        precision: Precision::F16,
        ..bottom_right_causal()
    });
    let gpu = attention(&c, q.view(), k.view(), v.view(), &opts);
    if !c.features().contains(wgpu::Features::SUBGROUP)
        || !c.features().contains(wgpu::Features::SHADER_F16)
    {
        assert!(
            matches!(gpu, Err(AttentionError::Unsupported(_))),
            "{gpu:?}"
        );
        return;
    }
    let gpu = gpu.expect("gpu f16");
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).expect("cpu");
    let e = frobenius(gpu.out.view(), cpu.out.view());
    assert!(e <= F16_BOUND, "out relative error {e}");
    let e = frobenius(gpu.lse.unwrap().view(), cpu.lse.unwrap().view());
    assert!(e <= F16_BOUND, "lse relative error {e}");
}

#[test]
fn narrow_groups_refuse_wide_heads() {
    let c = forced(Some(1));
    let (q, k, v) = qkv(4700, (1, 2, 1), (1, 64), (256, 256));
    let err = gpu_nan_prefilled_on(&c, &q, &k, &v, &decode(Default::default()))
        .expect_err("one lane per key cannot hold a row of 256 columns");
    let want_unsupported = !runs(&c, 1);
    match err {
        AttentionError::Unsupported(_) => assert!(want_unsupported),
        AttentionError::TooLarge { arg: "q", .. } => assert!(!want_unsupported),
        other => panic!("{other}"),
    }
}
