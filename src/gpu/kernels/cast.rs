//! Launcher for `shaders/to_f16.wgsl`: f32 to f16 storage, one slice per dispatch.

use bytemuck::{Pod, Zeroable};

use crate::gpu::kernels::pipelines::{Binding, KernelSpec};
use crate::gpu::kernels::source;

/// Bindings: cast parameters, f32 source slice, packed f16 destination slice.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "to_f16",
    source: source::TO_F16,
    bindings: &[Binding::Uniform, Binding::Read, Binding::ReadWrite],
    trusted: true,
};

/// Must match the WGSL struct `Cast` in to_f16.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct CastParams {
    pub count: u32,
    pub _pad: [u32; 3],
}

/// Must match WG in to_f16.wgsl.
const WG: u64 = 256;

/// Slices start on multiples of this many values, so both the f32 source (4 bytes each)
/// and the f16 destination (2 bytes each) start on 256-byte binding offsets.
pub(crate) const SLICE_ALIGN: u64 = 128;

/// One invocation per two values.
pub(crate) fn workgroups(count: u64) -> u64 {
    count.div_ceil(2).div_ceil(WG)
}
