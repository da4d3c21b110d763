//! Everything that touches wgpu.

pub(crate) mod device;
pub(crate) mod forward;
pub(crate) mod hooks;
pub(crate) mod kernels;
