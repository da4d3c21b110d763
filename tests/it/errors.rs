//! Every rejected input is a typed error naming the argument and the shapes, on both
//! backends, before anything reaches the device.

use crate::common::*;
use ndarray::{Array, Array4, IxDyn};
use wgpu_attention::{AttentionError, AttentionOptions, Mask, Window};

type Shape = (usize, usize, usize, usize);

fn zeros(shape: Shape) -> Array4<f32> {
    Array4::zeros(shape)
}

/// Runs both backends and checks they reject alike, with `arg` named and every
/// `needle` in the message.
fn rejects(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
    arg: &str,
    needles: &[&str],
) {
    let cpu = rejected_alike(q, k, v, opts);
    assert!(cpu.is_input_error(), "{cpu} should be an input error");
    let msg = cpu.to_string();
    assert!(
        msg.starts_with(&format!("{arg}:")),
        "{msg:?} should name {arg}"
    );
    for n in needles {
        assert!(msg.contains(n), "{msg:?} should mention {n:?}");
    }
}

/// [`rejects`] for zero-filled q, k and v of the given shapes and default options.
fn rejects_shapes((q, k, v): (Shape, Shape, Shape), arg: &str, needles: &[&str]) {
    rejects(
        &zeros(q),
        &zeros(k),
        &zeros(v),
        &Default::default(),
        arg,
        needles,
    );
}

#[test]
fn mismatched_shapes() {
    let q = (1, 2, 5, 8);
    rejects_shapes(
        (q, (1, 2, 5, 16), (1, 2, 5, 8)),
        "k",
        &["[1, 2, 5, 8]", "[1, 2, 5, 16]"],
    );
    rejects_shapes((q, (2, 2, 5, 8), (2, 2, 5, 8)), "k", &["batch"]);
    rejects_shapes((q, (1, 2, 5, 8), (1, 2, 6, 8)), "v", &["[1, 2, 6, 8]"]);
}

#[test]
fn heads_not_a_multiple() {
    let kv = (1, 2, 5, 8);
    rejects_shapes(((1, 3, 5, 8), kv, kv), "k", &["3", "2", "multiple"]);
}

#[test]
fn zero_size_dimensions() {
    let kv = (1, 1, 5, 8);
    rejects_shapes(((1, 1, 0, 8), kv, kv), "q", &["zero-size", "[1, 1, 0, 8]"]);
    let empty_batch = (0, 1, 5, 8);
    rejects_shapes((empty_batch, empty_batch, empty_batch), "q", &["zero-size"]);
    let no_keys = (1, 1, 0, 8);
    rejects_shapes(((1, 1, 5, 8), no_keys, no_keys), "k", &["zero-size"]);
}

#[test]
fn masks_that_do_not_broadcast() {
    let (q, kv) = (zeros((2, 3, 5, 8)), zeros((2, 3, 7, 8)));
    for shape in [vec![5, 6], vec![3, 5, 7, 1, 1], vec![7], vec![3, 3, 5, 7]] {
        let m = Array::from_elem(IxDyn(&shape), true);
        let opts = AttentionOptions {
            mask: Some(Mask::Bool(m.view())),
            ..Default::default()
        };
        rejects(&q, &kv, &kv, &opts, "mask", &[&format!("{shape:?}")]);
    }
    let m = Array::from_elem(IxDyn(&[4, 5, 7]), 0.0f32);
    let opts = AttentionOptions {
        mask: Some(Mask::Additive(m.view())),
        ..Default::default()
    };
    rejects(&q, &kv, &kv, &opts, "mask", &["[4, 5, 7]", "[2, 3, 5, 7]"]);
}

#[test]
fn bad_key_lengths_and_scale() {
    let (q, kv) = (zeros((2, 1, 5, 8)), zeros((2, 1, 7, 8)));
    let with_lens = |lens: &'static [u32]| AttentionOptions {
        kv_lens: Some(lens),
        ..Default::default()
    };
    rejects(&q, &kv, &kv, &with_lens(&[7]), "kv_lens", &["(2,)", "(1,)"]);
    rejects(
        &q,
        &kv,
        &kv,
        &with_lens(&[7, 8]),
        "kv_lens",
        &["8", "Lk = 7"],
    );
    let nan_scale = AttentionOptions {
        scale: Some(f32::NAN),
        ..Default::default()
    };
    rejects(&q, &kv, &kv, &nan_scale, "scale", &["finite"]);
}

#[test]
fn windows_accept_any_reach() {
    // Not an error: a window wider than the sequence simply allows everything.
    let (q, kv) = (zeros((1, 1, 3, 4)), zeros((1, 1, 3, 4)));
    let opts = AttentionOptions {
        window: Some(Window::new(u32::MAX, u32::MAX)),
        ..Default::default()
    };
    check_against_reference("huge window", &q, &kv, &kv, &opts);
}

#[test]
fn error_kinds_split_input_from_device() {
    assert!(!AttentionError::Device("x".into()).is_input_error());
    assert!(!AttentionError::NoAdapter("x".into()).is_input_error());
    assert!(!AttentionError::Unsupported("x".into()).is_input_error());
}
