//! Split-KV decoding against the CPU reference: short queries, long keys, grouped-query
//! heads, every option, and the row rules across key ranges.

use crate::common::*;
use crate::paths::*;
use ndarray::s;
use wgpu_attention::*;

fn decode(extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
    on_path(KernelPath::Decode, extra)
}

#[test]
fn one_query_against_many_keys() {
    for (n, &(lk, d)) in [(1, 8), (17, 1), (1500, 64), (4099, 128), (600, 256)]
        .iter()
        .enumerate()
    {
        let (q, k, v) = qkv(1100 + n as u64, (2, 8, 2), (1, lk), (d, d));
        check_against_reference(
            &format!("Lk {lk} D {d}"),
            &q,
            &k,
            &v,
            &decode(Default::default()),
        );
    }
}

#[test]
fn short_queries_straddling_tile_edges() {
    for (n, &lq) in [1usize, 2, 15, 16, 17].iter().enumerate() {
        let (q, k, v) = qkv(1200 + n as u64, (1, 4, 1), (lq, 1100), (16, 8));
        for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
            let opts = decode(AttentionOptions {
                causal: true,
                alignment,
                ..Default::default()
            });
            check_against_reference(&format!("Lq {lq} {alignment:?}"), &q, &k, &v, &opts);
        }
    }
}

#[test]
fn every_option_across_key_ranges() {
    let (q, k, v) = qkv(1300, (2, 6, 2), (3, 2000), (32, 16));
    for (what, opts) in EveryOption::new(1300, 3, 2000).cases() {
        check_against_reference(what, &q, &k, &v, &decode(opts));
    }
}

#[test]
fn grouped_heads_and_multi_query() {
    for (n, &(hq, hkv)) in [(32, 8), (8, 1), (3, 3)].iter().enumerate() {
        let (q, k, v) = qkv(1400 + n as u64, (1, hq, hkv), (2, 1300), (64, 64));
        let opts = decode(bottom_right_causal());
        check_against_reference(&format!("Hq {hq} Hkv {hkv}"), &q, &k, &v, &opts);
    }
}

#[test]
fn row_rules_across_key_ranges() {
    let (mut q, mut k, mut v) = qkv(1500, (1, 2, 1), (2, 1800), (8, 8));
    // NaN in head 1's first query: that row is NaN.
    q[[0, 1, 0, 3]] = f32::NAN;
    // NaN in a key only the last row (position 1799) sees under bottom-right causal.
    k[[0, 0, 1799, 0]] = f32::NAN;
    // NaN and inf in V behind keys a bool mask hides: nothing leaks.
    v[[0, 0, 10, 1]] = f32::NAN;
    v[[0, 0, 1200, 2]] = f32::INFINITY;
    let mut keep = ndarray::Array2::from_elem((2, 1800), true);
    keep[[0, 10]] = false;
    keep[[0, 1200]] = false;
    keep[[1, 10]] = false;
    keep[[1, 1200]] = false;
    let keep = keep.into_dyn();
    let opts = decode(AttentionOptions {
        mask: Some(Mask::Bool(keep.view())),
        ..bottom_right_causal()
    });
    let gpu = check_against_reference("NaN rows and hidden NaN values", &q, &k, &v, &opts);
    let lse = gpu.lse.unwrap();
    assert!(gpu.out[[0, 1, 0, 0]].is_nan() && lse[[0, 1, 0]].is_nan());
    assert!(gpu.out[[0, 0, 1, 0]].is_nan() && lse[[0, 0, 1]].is_nan());
    assert!(gpu.out.slice(s![0, 0, 0, ..]).iter().all(|x| x.is_finite()));

    // Every key hidden from the whole batch: out 0, lse -inf, in every key range.
    let lens = [0u32];
    let opts = decode(AttentionOptions {
        kv_lens: Some(&lens),
        ..Default::default()
    });
    let gpu = run_gpu(&q, &k, &v, &opts);
    assert!(gpu.out.iter().all(|&x| x == 0.0));
    assert!(gpu.lse.unwrap().iter().all(|&x| x == f32::NEG_INFINITY));
}

#[test]
fn chunked_by_a_small_binding_limit() {
    // 32 KiB bindings: one head's keys (1000 x 8 x 4 bytes) fit, the whole tensor does not.
    let c = small_binding_ctx(32 * 1024);
    let (q, k, v) = qkv(1600, (2, 4, 2), (3, 1000), (8, 8));
    let opts = decode(bottom_right_causal());
    check_against_reference_on(&c, "chunked", &q, &k, &v, &opts);
}

#[test]
fn auto_picks_a_path_that_matches_for_short_queries() {
    let (q, k, v) = qkv(1700, (1, 8, 2), (1, 3000), (64, 64));
    let opts = on_path(KernelPath::Auto, Default::default());
    check_against_reference("auto decode shape", &q, &k, &v, &opts);
}

#[test]
fn weights_come_from_the_combined_log_sum_exp() {
    let (q, k, v) = qkv(1800, (2, 4, 2), (3, 2050), (16, 16));
    let lens = [2050u32, 700];
    let opts = decode(AttentionOptions {
        return_weights: true,
        kv_lens: Some(&lens),
        ..bottom_right_causal()
    });
    check_against_reference("decode weights", &q, &k, &v, &opts);
}

#[test]
fn large_head_dims_are_refused() {
    let (q, k, v) = qkv(1801, (1, 1, 1), (1, 50), (300, 8));
    let err = refused_by_path(&q, &k, &v, &decode(Default::default()));
    assert!(err.to_string().contains("300"), "{err}");
}

#[test]
fn very_long_keys() {
    let (q, k, v) = qkv(1900, (1, 4, 1), (2, 40_000), (32, 32));
    let opts = decode(bottom_right_causal());
    check_against_reference("Lk 40000", &q, &k, &v, &opts);
}

#[test]
fn head_dims_of_one_tuning_class_read_k_and_v_their_own_way() {
    // D = 4 reads K and V four elements at a time, D = 3 one at a time; both round up to
    // one vec4, so they share a tuning class. A fresh context: nothing tuned before.
    let c = GpuContext::new().expect("no GPU adapter");
    for (n, &(d, dv)) in [(4, 4), (3, 2), (4, 8), (1, 1)].iter().enumerate() {
        let (q, k, v) = qkv(2000 + n as u64, (1, 4, 1), (2, 700), (d, dv));
        check_against_reference_on(
            &c,
            &format!("D {d} Dv {dv}"),
            &q,
            &k,
            &v,
            &decode(Default::default()),
        );
    }
}

#[test]
fn web_default_limits_still_fit_every_head_dim() {
    // WebGPU's default limits (16 KiB of workgroup memory, 256 invocations), as a browser
    // gives them: rows per workgroup shrink until the kernel fits.
    let c = context_with_limits(|_| wgpu::Limits::default());
    for (n, &(d, dv)) in [(256, 256), (128, 64), (64, 256)].iter().enumerate() {
        let (q, k, v) = qkv(2100 + n as u64, (1, 8, 2), (3, 1100), (d, dv));
        let opts = decode(bottom_right_causal());
        check_against_reference_on(&c, &format!("D {d} Dv {dv}"), &q, &k, &v, &opts);
    }
}
