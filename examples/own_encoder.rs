//! An application that owns everything: it opens its own wgpu device, makes its own
//! buffers, and records the crate's attention into its own command encoder between passes
//! of its own (a copy in, a residual add `y = x + attention(x)` in its own WGSL, a copy
//! out), then submits once. The result is checked against the CPU reference.
//!
//!     cargo run --release --example own_encoder

use ndarray::Array4;
use wgpu::util::DeviceExt;
use wgpu_attention::{
    attention_cpu, AttentionBuffers, AttentionError, AttentionOptions, GpuContext,
    PreparedAttention,
};

/// The application's own kernel: a residual connection around the attention.
const RESIDUAL: &str = r"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> attn: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) {
        y[id.x] = x[id.x] + attn[id.x];
    }
}
";

fn main() -> Result<(), AttentionError> {
    // The application's device, opened its own way.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .map_err(|e| AttentionError::NoAdapter(e.to_string()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default()))
        .map_err(|e| AttentionError::NoAdapter(e.to_string()))?;
    println!("adapter: {}", adapter.get_info().name);

    // Self-attention over x (B, H, L, D): q = k = v = x, causal.
    let shape = [1, 4, 12, 16];
    let x = Array4::from_shape_fn(shape, |(_, h, i, c)| {
        ((h * 31 + i * 7 + c) as f32 * 0.23).sin()
    });
    let bytes = (x.len() * 4) as u64;
    let storage = |label, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | usage,
            mapped_at_creation: false,
        })
    };
    let host_x = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("app x upload"),
        contents: bytemuck::cast_slice(x.as_slice().expect("standard layout")),
        usage: wgpu::BufferUsages::COPY_SRC,
    });
    let xb = storage("app x", wgpu::BufferUsages::COPY_DST);
    let attn = storage("app attention out", wgpu::BufferUsages::empty());
    let y = storage("app y", wgpu::BufferUsages::COPY_SRC);
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app readback"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("app residual"),
        source: wgpu::ShaderSource::Wgsl(RESIDUAL.into()),
    });
    let residual = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("app residual"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let residual_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("app residual"),
        layout: &residual.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: xb.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: attn.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: y.as_entire_binding(),
            },
        ],
    });

    // The crate shares the device; the attention is decided once for these shapes.
    let ctx = GpuContext::from_device(device.clone(), queue.clone());
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let prepared = pollster::block_on(PreparedAttention::new(&ctx, &shape, &shape, &shape, &opts))?;
    println!("attention prepared on the {:?} path", prepared.path());

    // One encoder, the application's: copy in, attention, residual, copy out.
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&host_x, 0, &xb, 0, bytes);
    let buffers = AttentionBuffers {
        q: &xb,
        k: &xb,
        v: &xb,
        out: &attn,
        weights: None,
        lse: None,
    };
    prepared.record(&ctx, &mut encoder, &buffers)?;
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&residual);
        pass.set_bind_group(0, &residual_group, &[]);
        pass.dispatch_workgroups((x.len() as u32).div_ceil(64), 1, 1);
    }
    encoder.copy_buffer_to_buffer(&y, 0, &readback, 0, bytes);
    queue.submit([encoder.finish()]);

    // The application's own readback.
    let slice = readback.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| AttentionError::Device(e.to_string()))?;
    rx.recv()
        .map_err(|e| AttentionError::Device(e.to_string()))?
        .map_err(|e| AttentionError::Device(e.to_string()))?;
    let mapped = slice
        .get_mapped_range()
        .map_err(|e| AttentionError::Device(e.to_string()))?;
    let got: Vec<f32> = bytemuck::cast_slice(&mapped[..]).to_vec();
    drop(mapped);
    readback.unmap();

    let want = attention_cpu(x.view(), x.view(), x.view(), &opts)?.out + &x;
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "y = x + attention(x), shape {shape:?}, one submission: largest difference from the CPU reference {worst:.2e}"
    );
    assert!(worst < 1e-4, "the GPU disagrees with the reference");
    Ok(())
}
