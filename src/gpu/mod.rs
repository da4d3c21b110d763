//! Everything that touches wgpu.

pub(crate) mod budget;
pub(crate) mod buffers;
pub(crate) mod chunk_bindings;
pub(crate) mod context;
pub(crate) mod decode;
pub(crate) mod dispatch;
pub(crate) mod f16;
pub(crate) mod forward;
pub(crate) mod fused;
pub(crate) mod hooks;
pub(crate) mod kernels;
pub(crate) mod linear;
pub(crate) mod params;
pub(crate) mod pipelines;
pub(crate) mod plan;
pub(crate) mod readback;
pub(crate) mod scopes;
pub mod source;
pub(crate) mod staged;
pub(crate) mod tensor;
// Timing needs a blocking clock: the bench module and the tuner, native only.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod timer;
pub(crate) mod tune;
pub(crate) mod upload;
pub(crate) mod zero_run;
