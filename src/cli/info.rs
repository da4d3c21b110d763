//! `wgpu-attention info`: what the machine offers and what the library takes from it.

use super::io::stdout::out;
use wgpu_attention::{enumerate_adapters, fused_key_budget, GpuContext};

use super::exit::CliError;

/// One line per adapter: name, backend, type, driver.
pub fn describe(info: &wgpu::AdapterInfo) -> String {
    let driver = [info.driver.as_str(), info.driver_info.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let driver = if driver.is_empty() {
        "unknown"
    } else {
        &driver
    };
    format!(
        "{} ({:?}, {:?}), driver {driver}",
        info.name, info.backend, info.device_type
    )
}

pub fn run() -> Result<(), CliError> {
    let adapters = pollster::block_on(enumerate_adapters());
    out!("adapters found: {}", adapters.len());
    for (i, a) in adapters.iter().enumerate() {
        out!("  [{i}] {}", describe(a));
    }
    // What steered the choice: wgpu's adapter variables, as set (or not) here.
    for var in ["WGPU_BACKEND", "WGPU_ADAPTER_NAME", "WGPU_POWER_PREF"] {
        let value = std::env::var(var).unwrap_or_else(|_| "(not set)".into());
        out!("{var}: {value}");
    }
    let ctx = GpuContext::new()?;
    let info = ctx.adapter_info();
    out!("chosen: {}", describe(info));
    out!("  vendor {:#06x}, device {:#06x}", info.vendor, info.device);

    let features: Vec<&str> = ctx.features().iter_names().map(|(name, _)| name).collect();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    out!("features used: {features}");

    let l = ctx.limits();
    out!("limits used:");
    let rows: [(&str, u64); 9] = [
        (
            "max_storage_buffer_binding_size",
            l.max_storage_buffer_binding_size,
        ),
        ("max_buffer_size", l.max_buffer_size),
        (
            "max_compute_workgroup_storage_size",
            l.max_compute_workgroup_storage_size.into(),
        ),
        (
            "max_compute_invocations_per_workgroup",
            l.max_compute_invocations_per_workgroup.into(),
        ),
        (
            "max_compute_workgroup_size_x",
            l.max_compute_workgroup_size_x.into(),
        ),
        (
            "max_compute_workgroup_size_y",
            l.max_compute_workgroup_size_y.into(),
        ),
        (
            "max_compute_workgroups_per_dimension",
            l.max_compute_workgroups_per_dimension.into(),
        ),
        (
            "max_storage_buffers_per_shader_stage",
            l.max_storage_buffers_per_shader_stage.into(),
        ),
        ("max_bind_groups", l.max_bind_groups.into()),
    ];
    for (name, value) in rows {
        out!("  {name}: {value}");
    }
    if ctx.features().contains(wgpu::Features::SUBGROUP) {
        out!(
            "  subgroup size: {} to {}",
            info.subgroup_min_size,
            info.subgroup_max_size
        );
    } else {
        out!("  subgroup size: n/a (no subgroup feature)");
    }
    // Some software drivers stop shader loops after a fixed count (Mesa 22's lavapipe
    // after 65,535 iterations); there the fused kernel splits long key ranges.
    match pollster::block_on(fused_key_budget(&ctx, 64))? {
        None => out!("fused key loop per workgroup (f32, D 64): no limit"),
        Some(keys) => out!(
            "fused key loop per workgroup (f32, D 64): at most {keys} keys, longer key ranges are split"
        ),
    }
    Ok(())
}
