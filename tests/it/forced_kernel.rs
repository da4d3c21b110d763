//! The test bodies every forced fused kernel runs (fused_tiled.rs, fused_lanes.rs): each
//! kernel forced on its own context, against the CPU reference, over head dims 1 to 256
//! with Dv != D, GQA, causal in both alignments, windows, key lengths, boolean and
//! additive masks, fully masked rows, NaN and infinities in q, K and V, lse, f16, and
//! key loops long enough for several tiles and row blocks. Where a forced kernel does
//! not fit a problem (head dims, device limits) the others serve it, as in the library.

/// The tests above for `$kernel` (a [`wgpu_attention::FusedKernel`]), named `$name` in
/// messages; `$built_for` tells from a context whether its adapter is one the kernel is
/// built for (where it must be the kernel that runs). Attributes after them (an
/// `#[ignore = "..."]` tier) go on every test. Expands to the items of the calling module.
#[macro_export]
macro_rules! forced_kernel_tests {
    ($kernel:expr, $name:literal, $built_for:expr $(, #[$tier:meta])* $(,)?) => {
        use std::sync::OnceLock;

        use ndarray::{s, Array4};
        use wgpu_attention::*;

        use $crate::common::*;
        use $crate::paths::*;

        /// A context whose fused path runs the forced kernel (tuning off: its first
        /// fitting configuration; the tuner's candidates are checked in the library's own
        /// tests).
        fn kernel_ctx() -> &'static GpuContext {
            static CTX: OnceLock<GpuContext> = OnceLock::new();
            CTX.get_or_init(|| {
                let c = GpuContext::new().expect("no GPU adapter");
                c.set_fused_kernel($kernel);
                c
            })
        }

        fn fused(extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
            on_path(KernelPath::Fused, extra)
        }

        fn check(
            what: &str,
            q: &Array4<f32>,
            k: &Array4<f32>,
            v: &Array4<f32>,
            o: &AttentionOptions<'_>,
        ) {
            check_against_reference_on(kernel_ctx(), what, q, k, v, o);
        }

        /// The forced kernel is the one that runs where the adapter is one it is built
        /// for (so the tests here test it), and the others serve elsewhere.
        #[test]
        $(#[$tier])*
        fn the_forced_kernel_runs_where_it_is_built_for() {
            let ctx = kernel_ctx();
            let built_for: fn(&GpuContext) -> bool = $built_for;
            for (d, causal) in [(64, false), (64, true), (128, false)] {
                let taken = pollster::block_on(fused_kernel_taken(
                    ctx,
                    [1, 4, 300, d],
                    [2, 500, d],
                    causal,
                ))
                .unwrap();
                let what = format!("{} forced, D {d}, causal {causal}", $name);
                if built_for(ctx) {
                    assert_eq!(taken, $kernel, "{what}");
                } else {
                    assert_ne!(taken, $kernel, "{what}");
                }
            }
        }

        #[test]
        $(#[$tier])*
        fn head_dims_and_value_dims() {
            for (n, &(d, dv)) in [
                (1, 1),
                (3, 5),
                (64, 64),
                (100, 36),
                (128, 128),
                (256, 256),
                (64, 128),
                (17, 65),
                (256, 1),
            ]
            .iter()
            .enumerate()
            {
                let (q, k, v) = qkv(900 + n as u64, (1, 2, 1), (70, 75), (d, dv));
                for causal in [false, true] {
                    let opts = fused(AttentionOptions {
                        causal,
                        ..Default::default()
                    });
                    check(&format!("D {d} Dv {dv} causal {causal}"), &q, &k, &v, &opts);
                }
            }
        }

        #[test]
        $(#[$tier])*
        fn many_tiles_gqa_and_both_alignments() {
            // 4 query heads per K/V head; lengths past one 64-row block and many 32-key tiles.
            let (q, k, v) = qkv(910, (2, 8, 2), (150, 300), (64, 64));
            for alignment in [Alignment::TopLeft, Alignment::BottomRight] {
                let opts = fused(AttentionOptions {
                    causal: true,
                    alignment,
                    ..Default::default()
                });
                check(&format!("gqa causal {alignment:?}"), &q, &k, &v, &opts);
            }
            check("gqa", &q, &k, &v, &fused(Default::default()));
            // More queries than keys, bottom-right: the first rows see no key at all.
            let (q, k, v) = qkv(911, (1, 2, 1), (200, 90), (32, 48));
            let opts = fused(bottom_right_causal());
            check("Lq > Lk bottom-right", &q, &k, &v, &opts);
        }

        #[test]
        $(#[$tier])*
        fn windows_and_key_lengths() {
            let (q, k, v) = qkv(920, (3, 4, 2), (97, 130), (64, 40));
            let lens = [130, 1, 77];
            for (left, right) in [(Some(5), Some(0)), (Some(40), None), (None, Some(3))] {
                let opts = fused(AttentionOptions {
                    window: Some(Window { left, right }),
                    kv_lens: Some(&lens),
                    causal: right.is_none(),
                    ..Default::default()
                });
                check(&format!("window {left:?} {right:?}"), &q, &k, &v, &opts);
            }
        }

        #[test]
        $(#[$tier])*
        fn bool_and_additive_masks_with_fully_masked_rows() {
            let (q, k, v) = qkv(930, (2, 2, 2), (70, 90), (64, 64));
            let mut keep = bool_mask(931, &[2, 2, 70, 90], 0.6);
            // Rows no key may attend: out 0, lse -inf.
            keep.slice_mut(s![0, 1, 5, ..]).fill(false);
            keep.slice_mut(s![1, 0, 66, ..]).fill(false);
            let opts = fused(AttentionOptions {
                mask: Some(Mask::Bool(keep.view())),
                ..Default::default()
            });
            let got = check_against_reference_on(kernel_ctx(), "bool mask", &q, &k, &v, &opts);
            assert!(got.out.slice(s![0, 1, 5, ..]).iter().all(|&x| x == 0.0));
            assert_eq!(got.lse.as_ref().unwrap()[[1, 0, 66]], f32::NEG_INFINITY);

            let mut bias = additive_mask(932, &[2, 1, 70, 90], 0.3);
            bias.slice_mut(s![1, 0, 12, ..]).fill(f32::NEG_INFINITY);
            let opts = fused(AttentionOptions {
                mask: Some(Mask::Additive(bias.view())),
                causal: true,
                ..Default::default()
            });
            check("additive mask causal", &q, &k, &v, &opts);
        }

        #[test]
        $(#[$tier])*
        fn nan_rules() {
            let (q, k, mut v) = qkv(940, (1, 2, 1), (40, 70), (64, 64));
            // A NaN in V behind a key causal hides from the first rows: only rows that see it
            // turn NaN.
            v[[0, 0, 50, 3]] = f32::NAN;
            v[[0, 0, 60, 7]] = f32::INFINITY;
            let opts = fused(bottom_right_causal());
            check("NaN in V behind masked keys", &q, &k, &v, &opts);
            // A NaN in q makes its row NaN, lse included.
            let (mut q, k, v) = qkv(941, (1, 2, 1), (40, 70), (16, 16));
            q[[0, 1, 9, 2]] = f32::NAN;
            let got = check_against_reference_on(
                kernel_ctx(),
                "NaN in q",
                &q,
                &k,
                &v,
                &fused(Default::default()),
            );
            assert!(got.lse.as_ref().unwrap()[[0, 1, 9]].is_nan());
            // An infinity in K gives infinite logits: +inf makes a row NaN, -inf hides the key.
            let (q, mut k, v) = qkv(942, (1, 2, 1), (40, 70), (16, 16));
            k[[0, 0, 10, 0]] = f32::INFINITY;
            let bias = additive_mask(943, &[1, 1, 40, 70], 0.2);
            let opts = fused(AttentionOptions {
                mask: Some(Mask::Additive(bias.view())),
                ..Default::default()
            });
            check("inf in K", &q, &k, &v, &opts);
        }

        #[test]
        $(#[$tier])*
        fn long_keys_split_where_the_driver_caps_loops() {
            // Enough keys that software drivers with a loop budget run the kernel over key
            // ranges merged by combine.wgsl.
            let (q, k, v) = qkv(950, (1, 2, 1), (65, 5000), (64, 64));
            check("long keys", &q, &k, &v, &fused(Default::default()));
            check(
                "long keys causal",
                &q,
                &k,
                &v,
                &fused(bottom_right_causal()),
            );
        }

        #[test]
        $(#[$tier])*
        fn f16_storage() {
            if !kernel_ctx().features().contains(wgpu::Features::SHADER_F16) {
                panic!("the adapter lacks shader-f16; this test needs it");
            }
            let (q, k, v) = qkv(960, (1, 4, 2), (90, 100), (64, 64));
            let opts = fused(AttentionOptions {
                precision: Precision::F16,
                causal: true,
                ..Default::default()
            });
            let got =
                attention(kernel_ctx(), q.view(), k.view(), v.view(), &opts).expect("gpu f16");
            // The reference computes in f32 from the same values.
            let want = attention_reference(q.view(), k.view(), v.view(), &opts).expect("cpu");
            let num: f32 = (&got.out - &want.out).iter().map(|x| x * x).sum();
            let den: f32 = want.out.iter().map(|x| x * x).sum();
            let rel = (num / den).sqrt();
            assert!(rel < 2e-3, "f16 {}: relative Frobenius error {rel}", $name);
        }
    };
}
