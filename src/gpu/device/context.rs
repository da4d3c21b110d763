//! Getting a device, kept apart from using one: a [`GpuContext`] is made either from the
//! best adapter or from an application's own `Device` and `Queue`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::error::{AttentionError, Result};
use crate::gpu::device::memo::Memo;
use crate::options::FusedKernel;

/// A wgpu device and queue plus what the kernels need to know about them, and what
/// calls remember (compiled pipelines, tuned configurations). Cheap to share: `Send + Sync` on native targets, and
/// every call takes `&self`.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    /// Set once by the device-lost callback: the reason and the driver's message.
    lost: Arc<OnceLock<String>>,
    /// A cap on storage bindings below the device's own limit (see `with_max_binding`).
    binding_cap: Option<u64>,
    /// How long a readback may wait for the device (see `with_wait_timeout`).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) wait_timeout: Option<Duration>,
    /// Compiled pipelines, tuned configurations and probed loop budgets.
    pub(crate) memo: Memo,
    /// Whether kernel candidates are timed (see `set_autotune`).
    autotune: AtomicBool,
    /// Which fused kernel serves (see `set_fused_kernel`).
    fused_kernel: Mutex<FusedKernel>,
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
    ///
    /// This installs the device's lost callback (replacing any the application set), so
    /// that calls after a device loss fail promptly with [`AttentionError::Device`]
    /// instead of waiting on a device that will never answer.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let lost = Arc::new(OnceLock::new());
        let record = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let _ = record.set(if message.is_empty() {
                format!("{reason:?}")
            } else {
                format!("{reason:?}: {message}")
            });
        });
        Self {
            info: device.adapter_info(),
            limits: device.limits(),
            features: device.features(),
            device,
            queue,
            lost,
            binding_cap: None,
            wait_timeout: None,
            memo: Memo::default(),
            autotune: AtomicBool::new(std::env::var("WGPU_ATTENTION_TUNE").is_ok_and(|v| v == "1")),
            fused_kernel: Mutex::new(FusedKernel::from_env()),
        }
    }

    /// Caps the size of every storage binding the kernels use at `bytes` (never above
    /// the device's own `max_storage_buffer_binding_size`). Problems whose tensors do
    /// not fit are split into more, smaller dispatches, exactly as on a device with
    /// that limit; results do not change. Use it to bound the scratch memory a call
    /// allocates (the staged path's score matrix is at most one binding), or to
    /// exercise the splitting in tests with small shapes.
    ///
    /// A cap so small that one row of one head does not fit makes calls fail with
    /// [`AttentionError::TooLarge`].
    #[must_use]
    pub fn with_max_binding(mut self, bytes: u64) -> Self {
        self.binding_cap = Some(bytes);
        self
    }

    /// Bounds how long a blocking readback waits for the device before failing with
    /// [`AttentionError::Device`]. The default is no bound: a readback waits until the
    /// work is done or the device is lost (drivers turn a hung GPU into a lost device).
    /// Software drivers have no such watchdog; an application that must never block
    /// for long can set one here. On the web nothing blocks, and this has no effect.
    #[must_use]
    pub fn with_wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// Turns timing of kernel candidates on or off for this context (off by default,
    /// unless `WGPU_ATTENTION_TUNE=1`). Choices already made are kept; classes met later
    /// are timed once each. Tuning costs a pipeline build per candidate (seconds on
    /// software drivers); untuned, a class gets the first fitting candidate.
    pub fn set_autotune(&self, enabled: bool) {
        self.autotune.store(enabled, Ordering::Relaxed);
    }

    /// Whether kernel candidates are timed.
    pub(crate) fn autotune(&self) -> bool {
        self.autotune.load(Ordering::Relaxed)
    }

    /// Chooses the kernel of the fused path for calls from now on (natively the default
    /// comes from `WGPU_ATTENTION_KERNEL`, see [`FusedKernel`]). Tuned choices are kept
    /// per kernel choice, so switching back and forth costs no retuning.
    pub fn set_fused_kernel(&self, kernel: FusedKernel) {
        *self.fused_kernel.lock().unwrap_or_else(|e| e.into_inner()) = kernel;
    }

    /// The kernel choice of the fused path.
    pub(crate) fn fused_kernel(&self) -> FusedKernel {
        *self.fused_kernel.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True once the device has been lost (or destroyed); every later call fails with
    /// [`AttentionError::Device`]. Make a new context to continue.
    pub fn is_lost(&self) -> bool {
        self.lost.get().is_some()
    }

    /// Fails fast when the device is known to be lost.
    pub(crate) fn check_alive(&self) -> Result<()> {
        match self.lost.get() {
            Some(reason) => Err(AttentionError::Device(format!("device lost: {reason}"))),
            None => Ok(()),
        }
    }

    /// Blocks until the device has finished everything submitted (timing and
    /// measuring; the browser cannot block).
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the wait fails.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_for_device(&self) -> crate::error::Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| AttentionError::Device(format!("waiting for the device: {e}")))
    }

    /// The error to report for a failure described by `detail`: a lost device when the
    /// device has been lost (polling once lets wgpu notice a destroyed device and run
    /// the lost callback), the device's own message otherwise.
    pub(crate) fn device_error(&self, detail: impl std::fmt::Display) -> AttentionError {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
        // wgpu's messages run over several lines; one line reads better in logs.
        let detail = detail
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        match self.lost.get() {
            Some(reason) => AttentionError::Device(format!("device lost: {reason} ({detail})")),
            None => AttentionError::Device(detail),
        }
    }

    /// A value unique to this context, to tell contexts apart: wgpu's own ids may repeat
    /// across instances, so two devices can compare equal. Holding it keeps it unique.
    pub(crate) fn identity(&self) -> Arc<OnceLock<String>> {
        self.lost.clone()
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
    /// element index inside a binding fits the kernels' 32-bit arithmetic, and by
    /// [`GpuContext::with_max_binding`].
    pub(crate) fn max_binding(&self) -> u64 {
        let device = self.limits.max_storage_buffer_binding_size.min(1 << 31);
        self.binding_cap.map_or(device, |cap| cap.min(device))
    }
}
