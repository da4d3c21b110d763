//! How q, k and v are stored on the device: the Rust side of the element-type preludes
//! (`shaders/prelude/elem_f32.wgsl`, `elem_f16.wgsl`), which pick a kernel's variant.

/// How q, k and v are stored in their device buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Elem {
    F32,
    F16,
}

impl Elem {
    pub(crate) fn bytes(self) -> u64 {
        match self {
            Elem::F32 => 4,
            Elem::F16 => 2,
        }
    }

    /// The storage type's name in kernel names.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::F16 => "f16",
        }
    }
}
