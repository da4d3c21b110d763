//! A context made from an application's own device, buffers shared without copies, and
//! outputs that stay on the device between calls.

use crate::common::*;
use ndarray::Array4;
use wgpu::util::DeviceExt;
use wgpu_attention::{
    attention_gpu_async, attention_reference, AttentionOptions, GpuContext, GpuTensor,
};

#[test]
fn application_device_and_buffers_are_used_in_place() {
    let (device, queue) = app_device(|l| l);
    let mut rng = Rng::new(21);
    let x: Array4<f32> = rng.array4((1, 2, 24, 16));
    // The application's own buffer, made with its own usages.
    let buffer = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("app tensor"),
        contents: bytemuck::cast_slice(x.as_slice().unwrap()),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    });
    let ctx = GpuContext::from_device(device, queue);
    let t = GpuTensor::from_buffer(buffer.clone(), &[1, 2, 24, 16]).unwrap();
    assert_eq!(
        t.buffer(),
        &buffer,
        "the tensor must wrap the same buffer, not a copy"
    );
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let out = pollster::block_on(attention_gpu_async(&ctx, &t, &t, &t, &opts)).unwrap();
    let got = pollster::block_on(out.read_async(&ctx)).unwrap();
    let want = attention_reference(x.view(), x.view(), x.view(), &opts).unwrap();
    assert_close("app device", got.out.view(), want.out.view(), ATOL, RTOL);
}

#[test]
fn buffers_too_small_or_without_storage_are_rejected() {
    let ctx = ctx();
    let small = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let e = GpuTensor::from_buffer(small, &[1, 1, 4, 8]).unwrap_err();
    assert!(e.to_string().contains("[1, 1, 4, 8]"), "{e}");
    let uniform = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 1024,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    assert!(GpuTensor::from_buffer(uniform, &[1, 1, 4, 8]).is_err());
}

#[test]
fn outputs_chain_on_the_device() {
    // Two layers of self-attention without leaving the device: layer 2 reads layer 1's out.
    let ctx = ctx();
    let mut rng = Rng::new(22);
    let x: Array4<f32> = rng.array4((2, 3, 17, 8));
    let t = GpuTensor::from_array(ctx, x.view().into_dyn()).unwrap();
    let opts = AttentionOptions::default();
    let first = pollster::block_on(attention_gpu_async(ctx, &t, &t, &t, &opts)).unwrap();
    let second = pollster::block_on(attention_gpu_async(
        ctx, &first.out, &first.out, &first.out, &opts,
    ))
    .unwrap();
    let got = pollster::block_on(second.read_async(ctx)).unwrap();
    let mid = attention_reference(x.view(), x.view(), x.view(), &opts)
        .unwrap()
        .out;
    let want = attention_reference(mid.view(), mid.view(), mid.view(), &opts).unwrap();
    assert_close("chained", got.out.view(), want.out.view(), ATOL, RTOL);
    let back = first.out.read(ctx).unwrap();
    assert_eq!(back.shape(), &[2, 3, 17, 8]);
}

#[test]
fn context_reports_adapter_and_limits() {
    let ctx = ctx();
    assert!(!ctx.adapter_info().name.is_empty());
    assert!(ctx.limits().max_storage_buffer_binding_size >= 128 << 20);
    assert!(ctx.limits().max_compute_invocations_per_workgroup >= 256);
}
