//! The subgroup rule, in one place. A kernel that uses subgroup operations is built by
//! `kernel_wgsl!(subgroups; ..)` (or, generated, after [`PRELUDE`]), which puts
//! `shaders/prelude/subgroups.wgsl` ahead of every declaration: where the standard
//! `enable subgroups;` directive belongs. Naga 30 (wgpu 30) refuses that directive and
//! takes the subgroup builtins under the device's `SUBGROUP` feature instead, so the
//! prelude holds no directive; browsers' compilers would require it, so no subgroup
//! kernel is offered on the web. The host offers one only where [`subgroup_sizes`] says
//! the adapter has subgroups.

use crate::gpu::device::context::GpuContext;

/// What a generated kernel that uses subgroup operations starts with.
pub(crate) const PRELUDE: &str = crate::gpu::kernels::wgsl::shader_file!("prelude/subgroups.wgsl");

/// The adapter's subgroup sizes, smallest and largest, when the device has subgroups and
/// reports sizes that are powers of two. Never on the web (see the module's docs).
pub(crate) fn subgroup_sizes(ctx: &GpuContext) -> Option<(u32, u32)> {
    if cfg!(target_arch = "wasm32") || !ctx.features.contains(wgpu::Features::SUBGROUP) {
        return None;
    }
    let info = ctx.adapter_info();
    let (lo, hi) = (info.subgroup_min_size, info.subgroup_max_size);
    let sane = lo >= 1 && lo <= hi && lo.is_power_of_two() && hi.is_power_of_two();
    sane.then_some((lo, hi))
}
