//! The layout of `shaders/model/gelu.wgsl`, GELU (erf form) in place, checked against its
//! WGSL. The BERT forward fuses GELU into the store of its intermediate dense layer
//! (`shaders/prelude/matmul.wgsl`, the same erfc fit), so no pass launches it.

use bytemuck::{Pod, Zeroable};

use super::glue::{uniform_layout, Binding, KernelSpec, UniformLayout};
use super::source;

/// Bindings: params, data.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_gelu",
    source: source::GELU,
    bindings: &[Binding::Uniform, Binding::ReadWrite],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `Gelu` in gelu.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct GeluParams {
    len: u32,
    _pad: [u32; 3],
}

/// [`GeluParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(GeluParams as "Gelu" { len, _pad => ["_pad0", "_pad1", "_pad2"] })
}
