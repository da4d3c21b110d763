//! Compiled pipelines, built once per (kernel, override constants) and cached in the
//! context: the first build of a pipeline can take seconds on software drivers.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::kernels::layout::UniformLayout;

/// How a kernel uses one binding; bindings are numbered by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    Uniform,
    Read,
    ReadWrite,
}

/// A kernel's WGSL source and the shape of its one bind group.
#[derive(Debug)]
pub(crate) struct KernelSpec {
    pub name: &'static str,
    pub source: &'static str,
    pub bindings: &'static [Binding],
    /// The kernel proves its own bounds and writes workgroup memory before reading it:
    /// built without runtime bounds checks and without zeroing workgroup memory.
    pub trusted: bool,
    /// The Rust layout of the uniform struct at each `Uniform` binding, in binding order,
    /// which the reflection test compares with the WGSL struct bound there.
    // Read by the reflection tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub uniforms: &'static [fn() -> UniformLayout],
}

/// A cache key: the kernel and the bit patterns of its override constants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    kernel: &'static str,
    constants: Vec<(&'static str, u64)>,
}

/// A pipeline and the layout of its bind group 0.
#[derive(Debug)]
pub(crate) struct KernelPipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// The name of every kernel this process has built a pipeline for, on any context.
static BUILT: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// The names of the kernels this process has built pipelines for, so that a test can
/// check each against the kernel table.
#[doc(hidden)]
pub fn kernels_built() -> Vec<&'static str> {
    let built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built.iter().copied().collect()
}

/// The pipeline for `spec` with these override constants, compiled on first use and
/// remembered in the context.
///
/// # Errors
/// [`crate::error::AttentionError::Device`] when the device rejects the kernel.
pub(crate) async fn pipeline(
    ctx: &GpuContext,
    spec: &KernelSpec,
    constants: &[(&'static str, f64)],
) -> Result<Arc<KernelPipeline>> {
    let key = PipelineKey {
        kernel: spec.name,
        constants: constants.iter().map(|(n, v)| (*n, v.to_bits())).collect(),
    };
    if let Some(p) = ctx.memo.get::<PipelineKey, Arc<KernelPipeline>>(&key) {
        return Ok(p);
    }
    // Built outside the lock: two threads may both build a missing pipeline, and the
    // second insert wins, which is harmless.
    let built = Arc::new(build(ctx, spec, constants).await?);
    BUILT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(spec.name);
    ctx.memo.insert(key, built.clone());
    Ok(built)
}

async fn build(
    ctx: &GpuContext,
    spec: &KernelSpec,
    constants: &[(&'static str, f64)],
) -> Result<KernelPipeline> {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = spec
        .bindings
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: match b {
                Binding::Uniform => wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                Binding::Read | Binding::ReadWrite => wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: *b == Binding::Read,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
            },
            count: None,
        })
        .collect();
    let device = &ctx.device;
    let scopes = ErrorScopes::push(ctx);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(spec.name),
        entries: &entries,
    });
    let descriptor = wgpu::ShaderModuleDescriptor {
        label: Some(spec.name),
        source: wgpu::ShaderSource::Wgsl(spec.source.into()),
    };
    let module = if spec.trusted {
        // SAFETY: trusted kernels guard every buffer, workgroup and private-array index
        // against the bound it must stay under (each guard is commented in the WGSL),
        // every loop is bounded by the problem's sizes, and every divisor is a tile
        // size or a validated nonzero size.
        unsafe {
            device.create_shader_module_trusted(descriptor, wgpu::ShaderRuntimeChecks::unchecked())
        }
    } else {
        device.create_shader_module(descriptor)
    };
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(spec.name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(spec.name),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            zero_initialize_workgroup_memory: !spec.trusted,
        },
        cache: None,
    });
    scopes
        .pop(ctx, &format!("building kernel {}", spec.name))
        .await?;
    Ok(KernelPipeline { pipeline, layout })
}
