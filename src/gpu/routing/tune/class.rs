//! The class of a problem that a tuning decision is remembered under.

use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::vec4s;
use crate::gpu::kernels::fused_lanes::SLOW_COMPILE_FROM_LEN;
use crate::options::FusedKernel;
use crate::problem::Problem;

/// What a tuning decision depends on besides the adapter (a context has one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ClassKey {
    decode: bool,
    kernel: FusedKernel,
    elem: Elem,
    dim4: u32,
    dim_v4: u32,
    group: usize,
    causal: bool,
    len_q: u8,
    len_k: u8,
}

/// Length classes of a tuning decision. One boundary is where the tuner starts timing
/// the lanes kernel's slowest-compiling shapes, so that what a class times never depends
/// on which of its problems came first.
pub(super) fn bucket(n: usize) -> u8 {
    match n {
        0..=16 => 0,
        17..=256 => 1,
        257..SLOW_COMPILE_FROM_LEN => 2,
        SLOW_COMPILE_FROM_LEN..=4096 => 3,
        _ => 4,
    }
}

impl ClassKey {
    pub(super) fn new(p: &Problem, elem: Elem, decode: bool, ctx_kernel: FusedKernel) -> Self {
        Self {
            decode,
            kernel: ctx_kernel,
            elem,
            dim4: vec4s(p.dim),
            dim_v4: vec4s(p.dim_v),
            group: p.group().min(16),
            causal: p.causal,
            len_q: bucket(p.len_q),
            len_k: bucket(p.len_k),
        }
    }
}
