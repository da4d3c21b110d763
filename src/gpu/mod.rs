//! Everything that touches wgpu, in layer order: `device/` (the context, buffers, error
//! scopes), `kernels/` (one launcher per WGSL kernel, the pipeline cache, the chunk
//! plan), `forward/` (recording), `routing/` (deciding: the route table, the tuner, the
//! loop-limit probe), then `call.rs` (one call, decided then recorded) and `hooks.rs`
//! (entry points for tests). `tests/it/architecture.rs` fails on any import loop between
//! them.

pub(crate) mod call;
pub(crate) mod device;
pub(crate) mod forward;
pub(crate) mod hooks;
pub(crate) mod kernels;
pub(crate) mod routing;
