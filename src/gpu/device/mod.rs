//! The device and what lives on it: the context, error scopes, buffers, readback, the
//! timer, stage marks and tensors.

pub(crate) mod bind_cache;
pub(crate) mod buffers;
pub(crate) mod context;
pub(crate) mod f16_tensor;
pub(crate) mod memo;
pub(crate) mod outputs;
pub(crate) mod readback;
pub(crate) mod recorder;
pub(crate) mod scopes;
pub(crate) mod stage_marks;
pub(crate) mod tensor;
// Timing needs a blocking clock: the bench module and the tuner, native only.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod timer;
