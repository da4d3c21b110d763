//! Every rejected input is a typed error naming the argument and the shapes, on both
//! backends, before anything reaches the device.

mod common;

use common::*;
use ndarray::{Array, Array4, IxDyn};
use wgpu_attention::{attention, attention_cpu, AttentionError, AttentionOptions, Mask, Window};

fn zeros(shape: (usize, usize, usize, usize)) -> Array4<f32> {
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
    let cpu = attention_cpu(q.view(), k.view(), v.view(), opts).unwrap_err();
    let gpu = attention(ctx(), q.view(), k.view(), v.view(), opts).unwrap_err();
    assert_eq!(cpu, gpu, "backends disagree");
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

#[test]
fn mismatched_shapes() {
    let q = zeros((1, 2, 5, 8));
    rejects(
        &q,
        &zeros((1, 2, 5, 16)),
        &zeros((1, 2, 5, 8)),
        &Default::default(),
        "k",
        &["[1, 2, 5, 8]", "[1, 2, 5, 16]"],
    );
    rejects(
        &q,
        &zeros((2, 2, 5, 8)),
        &zeros((2, 2, 5, 8)),
        &Default::default(),
        "k",
        &["batch"],
    );
    rejects(
        &q,
        &zeros((1, 2, 5, 8)),
        &zeros((1, 2, 6, 8)),
        &Default::default(),
        "v",
        &["[1, 2, 6, 8]"],
    );
}

#[test]
fn heads_not_a_multiple() {
    let kv = zeros((1, 2, 5, 8));
    rejects(
        &zeros((1, 3, 5, 8)),
        &kv,
        &kv,
        &Default::default(),
        "k",
        &["3", "2", "multiple"],
    );
}

#[test]
fn zero_size_dimensions() {
    let kv = zeros((1, 1, 5, 8));
    rejects(
        &zeros((1, 1, 0, 8)),
        &kv,
        &kv,
        &Default::default(),
        "q",
        &["zero-size", "[1, 1, 0, 8]"],
    );
    let q = zeros((0, 1, 5, 8));
    rejects(
        &q,
        &zeros((0, 1, 5, 8)),
        &zeros((0, 1, 5, 8)),
        &Default::default(),
        "q",
        &["zero-size"],
    );
    rejects(
        &zeros((1, 1, 5, 8)),
        &zeros((1, 1, 0, 8)),
        &zeros((1, 1, 0, 8)),
        &Default::default(),
        "k",
        &["zero-size"],
    );
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
    let lens = [7];
    rejects(
        &q,
        &kv,
        &kv,
        &AttentionOptions {
            kv_lens: Some(&lens),
            ..Default::default()
        },
        "kv_lens",
        &["(2,)", "(1,)"],
    );
    let lens = [7, 8];
    rejects(
        &q,
        &kv,
        &kv,
        &AttentionOptions {
            kv_lens: Some(&lens),
            ..Default::default()
        },
        "kv_lens",
        &["8", "Lk = 7"],
    );
    rejects(
        &q,
        &kv,
        &kv,
        &AttentionOptions {
            scale: Some(f32::NAN),
            ..Default::default()
        },
        "scale",
        &["finite"],
    );
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
