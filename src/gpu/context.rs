//! Getting a device, kept apart from using one: a [`GpuContext`] is made either from the
//! best adapter or from an application's own `Device` and `Queue`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{AttentionError, Result};
use crate::gpu::pipelines::{KernelPipeline, PipelineKey};

/// A wgpu device and queue plus what the kernels need to know about them, and the
/// cache of compiled pipelines. Cheap to share: `Send + Sync` on native targets, and
/// every call takes `&self`.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    pub(crate) pipelines: Mutex<HashMap<PipelineKey, Arc<KernelPipeline>>>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .finish_non_exhaustive()
    }
}

/// Features used when the adapter has them; none is required.
fn wanted_features() -> wgpu::Features {
    wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// Every adapter this process can see, on every backend allowed by `WGPU_BACKEND`.
pub async fn enumerate_adapters() -> Vec<wgpu::AdapterInfo> {
    instance()
        .enumerate_adapters(wgpu::Backends::all())
        .await
        .iter()
        .map(|a| a.get_info())
        .collect()
}

/// Picks an adapter the way wgpu's examples do: `WGPU_ADAPTER_NAME` (a case-insensitive
/// substring) if set, else the default for `WGPU_POWER_PREF`.
async fn choose_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let wanted = wanted.to_lowercase();
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&wanted))
            .ok_or_else(|| {
                AttentionError::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME={wanted:?} matches none of {names:?}"
                ))
            });
    }
    instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::from_env().unwrap_or_default(),
            ..Default::default()
        })
        .await
        .map_err(|e| AttentionError::NoAdapter(e.to_string()))
}

impl GpuContext {
    /// Opens the best adapter (honouring `WGPU_BACKEND`, `WGPU_ADAPTER_NAME`,
    /// `WGPU_POWER_PREF`) with the adapter's own limits, so large bindings and
    /// workgroups are available.
    ///
    /// # Errors
    /// [`AttentionError::NoAdapter`] when no adapter is found or the device cannot be opened.
    pub async fn new_async() -> Result<Self> {
        let adapter = choose_adapter(&instance()).await?;
        Self::from_adapter(&adapter).await
    }

    /// Blocking form of [`GpuContext::new_async`]. Native only.
    ///
    /// # Errors
    /// As [`GpuContext::new_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Self> {
        pollster::block_on(Self::new_async())
    }

    /// Opens a device on a given adapter, asking for its full limits and the optional
    /// features it has (f16, subgroups, timestamps).
    ///
    /// # Errors
    /// [`AttentionError::NoAdapter`] when the device cannot be opened.
    pub async fn from_adapter(adapter: &wgpu::Adapter) -> Result<Self> {
        let features = adapter.features() & wanted_features();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgpu-attention"),
                required_features: features,
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| AttentionError::NoAdapter(format!("request_device failed: {e}")))?;
        // Errors outside our error scopes must not take the process down.
        device.on_uncaptured_error(Arc::new(|e| {
            eprintln!("wgpu-attention: uncaptured device error: {e}");
        }));
        Ok(Self::from_device(device, queue))
    }

    /// Wraps an application's own device and queue: buffers are shared, nothing is
    /// copied. The kernels use whatever limits and features the device was opened with.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        Self {
            info: device.adapter_info(),
            limits: device.limits(),
            features: device.features(),
            device,
            queue,
            pipelines: Mutex::new(HashMap::new()),
        }
    }

    /// The adapter behind the device.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was opened with.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The features the device was opened with.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }

    /// The device, for applications that create their own buffers.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The largest storage binding the kernels use, in bytes. Capped at 2 GiB so every
    /// element index inside a binding fits the kernels' 32-bit arithmetic.
    pub(crate) fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(1 << 31)
    }
}
