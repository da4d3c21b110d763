//! Shapes and options of any kind: `validate` and the CPU reference must answer with a
//! result or a typed input error, never a panic.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayView4, ArrayViewD, IxDyn, ShapeBuilder};
use wgpu_attention::{attention_cpu, validate, Alignment, AttentionOptions, Mask, Window};

#[derive(Arbitrary, Debug)]
struct Input {
    q: Vec<usize>,
    k: Vec<usize>,
    v: Vec<usize>,
    mask: Option<(bool, Vec<usize>)>,
    kv_lens: Option<Vec<u32>>,
    scale: Option<f32>,
    causal: bool,
    bottom_right: bool,
    window: Option<(Option<u32>, Option<u32>)>,
    weights: bool,
    lse: bool,
}

/// A view of any shape over one element (every stride 0), so huge shapes cost nothing.
fn view<'a, T>(shape: &[usize], one: &'a [T]) -> Option<ArrayViewD<'a, T>> {
    let strides = IxDyn(&vec![0; shape.len()]);
    ArrayViewD::from_shape(IxDyn(shape).strides(strides), one).ok()
}

fn view4<'a>(shape: &[usize], one: &'a [f32]) -> Option<ArrayView4<'a, f32>> {
    view(shape, one)?.into_dimensionality().ok()
}

fuzz_target!(|input: Input| {
    let (ones, bias) = ([true], [0.25f32]);
    let mask = match &input.mask {
        Some((false, s)) => view(s, &ones).map(Mask::Bool),
        Some((true, s)) => view(s, &bias).map(Mask::Additive),
        None => None,
    };
    let opts = AttentionOptions {
        scale: input.scale,
        causal: input.causal,
        alignment: if input.bottom_right {
            Alignment::BottomRight
        } else {
            Alignment::TopLeft
        },
        window: input.window.map(|(left, right)| Window { left, right }),
        mask,
        kv_lens: input.kv_lens.as_deref(),
        return_weights: input.weights,
        return_lse: input.lse,
        ..Default::default()
    };
    let p = match validate(&input.q, &input.k, &input.v, &opts) {
        Ok(p) => p,
        Err(e) => {
            assert!(e.is_input_error(), "{e}");
            return;
        }
    };
    assert!(p.heads_q % p.heads_kv == 0);
    // Run the reference only where the work is small.
    let work = [p.batch, p.heads_q, p.len_q, p.len_k, p.dim + p.dim_v]
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n));
    if work.is_some_and(|w| w <= 1 << 16) {
        let x = [0.5f32];
        let (Some(q), Some(k), Some(v)) = (
            view4(&input.q, &x),
            view4(&input.k, &x),
            view4(&input.v, &x),
        ) else {
            return;
        };
        let out = attention_cpu(q, k, v, &opts).expect("validated inputs must run");
        assert_eq!(out.out.shape(), &[p.batch, p.heads_q, p.len_q, p.dim_v]);
        assert!(out.out.iter().all(|x| x.is_finite()));
    }
});
