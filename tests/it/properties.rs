//! Property tests: random shapes and options, GPU (NaN-prefilled) against the CPU
//! reference; and validation never panics, whatever the shapes.

use crate::common::*;
use ndarray::{Array, ArrayD, IxDyn};
use proptest::prelude::*;
use wgpu_attention::*;

/// One random problem: sizes, options and a seed for the data.
#[derive(Debug, Clone)]
struct Spec {
    batch: usize,
    heads_kv: usize,
    group: usize,
    len_q: usize,
    len_k: usize,
    dim: usize,
    dim_v: usize,
    causal: bool,
    bottom_right: bool,
    window: Option<(Option<u32>, Option<u32>)>,
    /// (additive?, rank, which of the four axes broadcast)
    mask: Option<(bool, usize, [bool; 4])>,
    kv_lens: Option<Vec<u32>>,
    scale: Option<f32>,
    weights: bool,
    lse: bool,
    // Without weights: 0 the automatic choice, 1 the fused kernel, 2 the decode kernel.
    path: u8,
    seed: u64,
}

fn spec() -> impl Strategy<Value = Spec> {
    let sizes = (1..=2usize, 1..=2usize, 1..=3usize, 1..=20usize, 1..=24usize);
    let dims = (1..=20usize, 1..=20usize);
    let window =
        proptest::option::of((proptest::option::of(0..8u32), proptest::option::of(0..8u32)));
    let mask = proptest::option::of((any::<bool>(), 2..=4usize, any::<[bool; 4]>()));
    let scale = proptest::option::of(prop_oneof![0.01f32..3.0, -2.0f32..-0.01]);
    let flags = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
    (
        sizes,
        dims,
        window,
        mask,
        scale,
        flags,
        any::<u64>(),
        any::<bool>(),
        0..3u8,
    )
        .prop_flat_map(
            |((b, hkv, g, lq, lk), (d, dv), window, mask, scale, flags, seed, lens, path)| {
                let kv_lens = if lens {
                    proptest::collection::vec(0..=lk as u32, b)
                        .prop_map(Some)
                        .boxed()
                } else {
                    Just(None).boxed()
                };
                kv_lens.prop_map(move |kv_lens| Spec {
                    batch: b,
                    heads_kv: hkv,
                    group: g,
                    len_q: lq,
                    len_k: lk,
                    dim: d,
                    dim_v: dv,
                    causal: flags.0,
                    bottom_right: flags.1,
                    window,
                    mask,
                    kv_lens,
                    scale,
                    weights: flags.2,
                    lse: flags.3,
                    path,
                    seed,
                })
            },
        )
}

fn mask_shape(s: &Spec, rank: usize, broadcast: [bool; 4]) -> Vec<usize> {
    let full = [s.batch, s.heads_kv * s.group, s.len_q, s.len_k];
    (4 - rank..4)
        .map(|a| if broadcast[a] { 1 } else { full[a] })
        .collect()
}

fn run(s: &Spec) -> std::result::Result<(), TestCaseError> {
    let mut rng = crate::common::Rng::new(s.seed);
    let hq = s.heads_kv * s.group;
    let q = rng.array4((s.batch, hq, s.len_q, s.dim));
    let k = rng.array4((s.batch, s.heads_kv, s.len_k, s.dim));
    let v = rng.array4((s.batch, s.heads_kv, s.len_k, s.dim_v));
    let (mut bools, mut bias): (Option<ArrayD<bool>>, Option<ArrayD<f32>>) = (None, None);
    if let Some((additive, rank, broadcast)) = s.mask {
        let shape = IxDyn(&mask_shape(s, rank, broadcast));
        if additive {
            bias = Some(Array::from_shape_simple_fn(shape, || {
                if rng.uniform() < 0.2 {
                    f32::NEG_INFINITY
                } else {
                    rng.normal()
                }
            }));
        } else {
            bools = Some(Array::from_shape_simple_fn(shape, || rng.uniform() < 0.7));
        }
    }
    let mask = match (&bools, &bias) {
        (Some(m), _) => Some(Mask::Bool(m.view())),
        (_, Some(m)) => Some(Mask::Additive(m.view())),
        _ => None,
    };
    let opts = AttentionOptions {
        scale: s.scale,
        causal: s.causal,
        alignment: if s.bottom_right {
            Alignment::BottomRight
        } else {
            Alignment::TopLeft
        },
        window: s.window.map(|(left, right)| Window { left, right }),
        mask,
        kv_lens: s.kv_lens.as_deref(),
        return_weights: s.weights,
        return_lse: s.lse,
        path: match (s.weights, s.path) {
            (false, 1) => KernelPath::Fused,
            (false, 2) => KernelPath::Decode,
            _ => KernelPath::Auto,
        },
        ..Default::default()
    };
    // check_against_reference panics with the worst element; proptest reports the
    // panic together with the (shrunk) spec.
    check_against_reference("property", &q, &k, &v, &opts);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 600,
        // The GPU makes each case cost milliseconds; keep shrinking bounded.
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn gpu_matches_the_reference(s in spec()) {
        run(&s)?;
    }
}

/// Shapes of any rank and size, including zero and sizes whose products overflow.
fn any_shape() -> impl Strategy<Value = Vec<usize>> {
    let dim = prop_oneof![
        4 => 0..6usize,
        2 => 1..100_000usize,
        1 => Just(usize::MAX),
        1 => Just(1usize << 31),
        1 => any::<usize>(),
    ];
    proptest::collection::vec(dim, 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn validation_never_panics(
        q in any_shape(),
        k in any_shape(),
        v in any_shape(),
        mask_shape in proptest::option::of(proptest::collection::vec(0..4usize, 0..6)),
        lens in proptest::option::of(proptest::collection::vec(any::<u32>(), 0..4)),
        scale in proptest::option::of(any::<f32>()),
        window in proptest::option::of((any::<Option<u32>>(), any::<Option<u32>>())),
        flags in any::<(bool, bool, bool, bool)>(),
    ) {
        let mask = mask_shape.map(|s| Array::from_elem(IxDyn(&s), true));
        let opts = AttentionOptions {
            scale,
            causal: flags.0,
            alignment: if flags.1 { Alignment::BottomRight } else { Alignment::TopLeft },
            window: window.map(|(left, right)| Window { left, right }),
            mask: mask.as_ref().map(|m| Mask::Bool(m.view())),
            kv_lens: lens.as_deref(),
            return_weights: flags.2,
            return_lse: flags.3,
            ..Default::default()
        };
        match validate(&q, &k, &v, &opts) {
            Ok(p) => {
                prop_assert_eq!(p.batch, q[0]);
                prop_assert!(p.heads_q % p.heads_kv == 0);
                let _ = p.allowed_pairs_per_head();
            }
            Err(e) => prop_assert!(e.is_input_error(), "{e}"),
        }
        // Allocation checks sizes before touching the device: never a panic, and for
        // shapes this large an error rather than a device allocation.
        if let Ok(outputs) = GpuOutputs::allocate(ctx(), &q, &k, &v, &opts) {
            prop_assert!(outputs.out.len() <= 1 << 28);
        }
    }
}
