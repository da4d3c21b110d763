//! The Rust side of a kernel's uniform struct, as the reflection test compares it with the
//! WGSL: the struct's WGSL name, its size, and each 4-byte scalar member's name, offset and
//! kind. A kernel's [`crate::gpu::kernels::pipelines::KernelSpec`] names it, so that every
//! uniform struct of the crate is checked, the model kernels' included.

/// The kind of a 4-byte scalar member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarKind {
    U32,
    I32,
    F32,
}

/// A Rust field type and the WGSL scalar it must be declared as.
pub(crate) trait WgslScalar {
    const KIND: ScalarKind;
}
impl WgslScalar for u32 {
    const KIND: ScalarKind = ScalarKind::U32;
}
impl WgslScalar for i32 {
    const KIND: ScalarKind = ScalarKind::I32;
}
impl WgslScalar for f32 {
    const KIND: ScalarKind = ScalarKind::F32;
}
impl<T: WgslScalar, const N: usize> WgslScalar for [T; N] {
    const KIND: ScalarKind = T::KIND;
}

/// The kind of a field, from a value of its type.
pub(crate) fn kind_of<T: WgslScalar>(_: &T) -> ScalarKind {
    T::KIND
}

/// A uniform struct as Rust lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniformLayout {
    /// The WGSL struct's name.
    pub wgsl: &'static str,
    /// `size_of` the Rust type.
    pub size: usize,
    /// Every 4-byte member in order: (WGSL name, byte offset, kind).
    pub members: Vec<(String, usize, ScalarKind)>,
}

/// The [`UniformLayout`] of a `#[repr(C)]` `Pod` struct `$t`, declared in WGSL as
/// `$wgsl`: each scalar field under its own name, and each array field `f: [T; N]` as the
/// N WGSL members listed after it (`f => ["a", "b"]`), 4 bytes apart.
macro_rules! uniform_layout {
    ($t:ty as $wgsl:literal { $($f:ident $(=> [$($n:literal),+ $(,)?])?),+ $(,)? }) => {{
        #[allow(unused_imports)]
        use $crate::gpu::kernels::layout::{kind_of, UniformLayout};
        let zero: $t = bytemuck::Zeroable::zeroed();
        let mut members = Vec::new();
        $(
            let names: &[&str] = &[$($($n),+)?];
            let at = std::mem::offset_of!($t, $f);
            let kind = kind_of(&zero.$f);
            if names.is_empty() {
                members.push((stringify!($f).to_string(), at, kind));
            } else {
                assert_eq!(
                    std::mem::size_of_val(&zero.$f),
                    4 * names.len(),
                    "{}.{}: one WGSL name per element",
                    stringify!($t),
                    stringify!($f)
                );
                for (i, n) in names.iter().enumerate() {
                    members.push((n.to_string(), at + 4 * i, kind));
                }
            }
        )+
        UniformLayout {
            wgsl: $wgsl,
            size: std::mem::size_of::<$t>(),
            members,
        }
    }};
}

pub(crate) use uniform_layout;
