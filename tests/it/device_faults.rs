//! Device faults reach the caller as typed errors: a lost device, a validation error,
//! a tensor beyond the device's buffer limits, a destroyed buffer, a wait that runs out.

use std::time::{Duration, Instant};

use crate::common::*;
use ndarray::Array4;
use wgpu_attention::*;

fn inputs() -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    let mut rng = Rng::new(7);
    (
        rng.array4((1, 2, 9, 8)),
        rng.array4((1, 2, 11, 8)),
        rng.array4((1, 2, 11, 8)),
    )
}

fn assert_device_lost(what: &str, r: Result<impl std::fmt::Debug>) {
    match r {
        Err(AttentionError::Device(m)) if m.starts_with("device lost") => {}
        other => panic!("{what}: expected a device-lost error, got {other:?}"),
    }
}

#[test]
fn lost_device_fails_promptly_and_a_new_context_works() {
    let (q, k, v) = inputs();
    let opts = AttentionOptions::default();
    let ctx = GpuContext::new().expect("no GPU adapter");
    attention(&ctx, q.view(), k.view(), v.view(), &opts).expect("healthy device");
    let kept = GpuTensor::from_array(&ctx, q.view().into_dyn()).unwrap();

    ctx.device().destroy();
    let start = Instant::now();
    assert_device_lost(
        "attention",
        attention(&ctx, q.view(), k.view(), v.view(), &opts),
    );
    assert!(
        ctx.is_lost(),
        "the lost callback must have recorded the loss"
    );
    // Every entry point now fails at once, without waiting on the device.
    assert_device_lost(
        "attention again",
        attention(&ctx, q.view(), k.view(), v.view(), &opts),
    );
    assert_device_lost(
        "from_array",
        GpuTensor::from_array(&ctx, q.view().into_dyn()),
    );
    assert_device_lost("empty", GpuTensor::empty(&ctx, &[2, 3]));
    assert_device_lost(
        "allocate",
        GpuOutputs::allocate(&ctx, q.shape(), k.shape(), v.shape(), &opts),
    );
    assert_device_lost("read", kept.read(&ctx));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "calls on a lost device took {:?}",
        start.elapsed()
    );

    let fresh = GpuContext::new().expect("a new context after a loss");
    let gpu = attention(&fresh, q.view(), k.view(), v.view(), &opts).unwrap();
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    assert_close("out", gpu.out.view(), cpu.out.view(), ATOL, RTOL);
}

#[test]
fn invalid_dispatch_is_a_device_error_and_the_context_survives() {
    let ctx = ctx();
    match pollster::block_on(invalid_dispatch_for_tests(ctx)) {
        Err(AttentionError::Device(m)) => {
            assert!(m.contains("validation error"), "{m}");
            assert!(m.contains("65535"), "names the limit: {m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
        other => panic!("expected a device validation error, got {other:?}"),
    }
    assert!(!ctx.is_lost());
    let (q, k, v) = inputs();
    let opts = AttentionOptions::default();
    let gpu = attention(ctx, q.view(), k.view(), v.view(), &opts).unwrap();
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    assert_close("out", gpu.out.view(), cpu.out.view(), ATOL, RTOL);
}

#[test]
fn destroyed_input_buffer_is_a_device_error() {
    let ctx = ctx();
    let (q, k, v) = inputs();
    let opts = AttentionOptions::default();
    let up = |a: &Array4<f32>| GpuTensor::from_array(ctx, a.view().into_dyn()).unwrap();
    let (qt, kt, vt) = (up(&q), up(&k), up(&v));
    let outputs = GpuOutputs::allocate(ctx, q.shape(), k.shape(), v.shape(), &opts).unwrap();
    kt.buffer().destroy();
    let r = pollster::block_on(attention_gpu_into_async(
        ctx, &qt, &kt, &vt, &opts, &outputs,
    ));
    match r {
        Err(AttentionError::Device(m)) => assert!(m.contains("destroyed"), "{m}"),
        other => panic!("expected a device error, got {other:?}"),
    }
    assert!(!ctx.is_lost());
    // The same context keeps working.
    let vt2 = up(&k);
    pollster::block_on(attention_gpu_into_async(
        ctx, &qt, &vt2, &vt, &opts, &outputs,
    ))
    .unwrap();
    let got = pollster::block_on(outputs.read_async(ctx)).unwrap();
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    assert_close("out", got.out.view(), cpu.out.view(), ATOL, RTOL);
}

/// A device opened with a 1 MiB buffer limit, as a small GPU or a browser might have.
fn small_device() -> GpuContext {
    context_with_limits(|l| wgpu::Limits {
        max_buffer_size: 1 << 20,
        max_storage_buffer_binding_size: 1 << 20,
        ..l
    })
}

#[test]
fn tensors_beyond_max_buffer_size_are_too_large_before_the_device_is_touched() {
    let ctx = small_device();
    let opts = AttentionOptions::default();
    // q is 2 MiB: above the 1 MiB limit.
    let q = Array4::<f32>::zeros((1, 8, 256, 256));
    let k = Array4::<f32>::zeros((1, 8, 4, 256));
    match attention(&ctx, q.view(), k.view(), k.view(), &opts) {
        Err(AttentionError::TooLarge { arg: "q", detail }) => {
            assert!(detail.contains("[1, 8, 256, 256]"), "{detail}");
            assert!(detail.contains("max_buffer_size of 1048576"), "{detail}");
        }
        other => panic!("expected TooLarge for q, got {other:?}"),
    }
    // Inputs fit, but the requested weights (B, H, Lq, Lk) do not.
    let q = Array4::<f32>::zeros((1, 1, 600, 4));
    let k = Array4::<f32>::zeros((1, 1, 600, 4));
    let with_weights = AttentionOptions {
        return_weights: true,
        ..Default::default()
    };
    let r = attention(&ctx, q.view(), k.view(), k.view(), &with_weights);
    assert!(
        matches!(r, Err(AttentionError::TooLarge { arg: "weights", .. })),
        "{r:?}"
    );
    // Without weights the same problem runs, split to fit the 1 MiB bindings.
    let mut rng = Rng::new(3);
    let (q, k, v) = (
        rng.array4((1, 1, 600, 4)),
        rng.array4((1, 1, 600, 4)),
        rng.array4((1, 1, 600, 4)),
    );
    let gpu = attention(&ctx, q.view(), k.view(), v.view(), &opts).unwrap();
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    assert_close("out", gpu.out.view(), cpu.out.view(), ATOL, RTOL);
    // Direct allocations are checked the same way, including counts that overflow.
    let r = GpuTensor::empty(&ctx, &[1 << 20]);
    assert!(matches!(r, Err(AttentionError::TooLarge { .. })), "{r:?}");
    let r = GpuTensor::empty(&ctx, &[usize::MAX, 4]);
    assert!(matches!(r, Err(AttentionError::TooLarge { .. })), "{r:?}");
    let huge = [1usize << 20, 1 << 20, 1 << 20, 1 << 20];
    let r = GpuOutputs::allocate(&ctx, &huge, &huge, &huge, &opts);
    assert!(
        matches!(r, Err(AttentionError::TooLarge { arg: "q", .. })),
        "{r:?}"
    );
    assert!(!ctx.is_lost());
}

#[test]
fn outputs_aliasing_inputs_are_rejected() {
    let ctx = ctx();
    let x = Array4::<f32>::zeros((1, 1, 4, 4));
    let t = GpuTensor::from_array(ctx, x.view().into_dyn()).unwrap();
    let opts = AttentionOptions::default();
    let outputs = GpuOutputs {
        out: t.clone(),
        weights: None,
        lse: None,
    };
    let r = pollster::block_on(attention_gpu_into_async(ctx, &t, &t, &t, &opts, &outputs));
    match r {
        Err(AttentionError::InvalidOption { arg: "out", detail }) => {
            assert!(
                detail.contains("shares its device buffer with q"),
                "{detail}"
            )
        }
        other => panic!("expected InvalidOption for out, got {other:?}"),
    }
}

#[test]
fn a_wait_timeout_turns_a_long_wait_into_an_error() {
    let ctx = GpuContext::new()
        .expect("no GPU adapter")
        .with_wait_timeout(Duration::ZERO);
    let (q, k, v) = inputs();
    match attention(&ctx, q.view(), k.view(), v.view(), &Default::default()) {
        Err(AttentionError::Device(m)) => assert!(m.contains("wait timeout"), "{m}"),
        other => panic!("expected a wait-timeout error, got {other:?}"),
    }
    assert!(!ctx.is_lost());
}
