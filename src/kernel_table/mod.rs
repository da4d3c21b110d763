//! Every WGSL kernel the crate builds, in one list: the attention kernels, the dense-layer
//! kernels, the model kernels, and every generated variant. The list feeds the shader
//! validation and the reflection tests (`reflection.rs`: each kernel parses, validates
//! with exactly the capabilities it declares, binds as its spec says, and each uniform
//! struct matches its Rust type), and the pipeline cache builds only kernels it lists
//! (`tests/it/shaders.rs` checks every pipeline the suite built against it).
//!
//! Adding a kernel: its spec here, in [`kernels`]; how its source is made is in
//! [`crate::gpu::kernels::wgsl`].

use crate::gpu::kernels::pipelines::KernelSpec;
use crate::gpu::kernels::{
    cast, combine, decode, decode_subgroup, fused, fused_lanes, fused_tiled, linear, patterns, pv,
    qk, softmax, weights,
};

#[cfg(test)]
mod reflection;

/// How often a kernel is validated: the quick tier on every `cargo test`, the slow tier
/// (the generated variants between the representative ones) where `.ci/run` runs the
/// ignored tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    Quick,
    Slow,
}

/// One kernel of the table.
pub(crate) struct Kernel {
    /// The name its pipeline is cached under.
    pub name: String,
    pub tier: Tier,
    /// For a generated kernel, the rows per workgroup it must declare as `ROWS` (its
    /// launcher dispatches for that many).
    // Read by the reflection tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub rows: Option<u64>,
    source: Source,
}

/// Where a kernel's spec comes from: a constant, or a variant generated on first use.
enum Source {
    Fixed(&'static KernelSpec),
    Tiled(fused_tiled::Variant),
    Lanes(fused_lanes::Variant),
}

impl Kernel {
    fn fixed(spec: &'static KernelSpec) -> Self {
        Kernel {
            name: spec.name.to_string(),
            tier: Tier::Quick,
            rows: None,
            source: Source::Fixed(spec),
        }
    }

    /// Its spec (generating the source of a generated variant).
    pub(crate) fn spec(&self) -> &'static KernelSpec {
        match self.source {
            Source::Fixed(spec) => spec,
            Source::Tiled(v) => fused_tiled::spec(v),
            Source::Lanes(v) => fused_lanes::spec(v),
        }
    }
}

/// Every kernel the crate builds.
pub(crate) fn kernels() -> Vec<Kernel> {
    let fixed: Vec<&'static KernelSpec> = vec![
        &qk::SPEC,
        &softmax::SPEC,
        &pv::SPEC,
        &fused::SPEC,
        &fused::SPEC_F16,
        &decode::SPEC,
        &decode::SPEC_VEC4,
        &decode::SPEC_F16,
        &decode::SPEC_VEC4_F16,
        &decode_subgroup::SPEC,
        &decode_subgroup::SPEC_VEC4,
        &decode_subgroup::SPEC_F16,
        &decode_subgroup::SPEC_VEC4_F16,
        &weights::SPEC,
        &weights::SPEC_F16,
        &combine::COMBINE_SPEC,
        &cast::SPEC,
        &patterns::SPEC,
    ];
    let mut all: Vec<Kernel> = fixed.into_iter().map(Kernel::fixed).collect();
    let dense = linear::TILED_SPECS
        .iter()
        .chain(&linear::LANES_SPECS)
        .chain(&linear::SPLIT_SPECS);
    all.extend(dense.map(Kernel::fixed));
    all.extend(
        crate::model::ops::kernel_specs()
            .into_iter()
            .map(Kernel::fixed),
    );
    // The generated kernels: the quick tier takes every storage type, K/V reading and
    // subgroup setting with the smallest and largest tiled chunk counts and the two
    // smallest unrolled lanes bodies.
    for v in fused_tiled::all_variants() {
        let quick = v.nv == 1 || v.nv == fused_tiled::MAX_NV;
        all.push(Kernel {
            name: fused_tiled::name(v),
            tier: if quick { Tier::Quick } else { Tier::Slow },
            rows: Some(fused_tiled::ROWS),
            source: Source::Tiled(v),
        });
    }
    for v in fused_lanes::all_variants() {
        let shape = fused_lanes::LanesShape {
            sg: v.sg,
            rows: v.rows,
        };
        let quick = v.rows * v.d4.max(v.dv4) <= 16;
        all.push(Kernel {
            name: fused_lanes::name(v),
            tier: if quick { Tier::Quick } else { Tier::Slow },
            rows: Some(shape.tile_rows()),
            source: Source::Lanes(v),
        });
    }
    all
}

/// Every kernel's name and full WGSL source, for checks without a GPU: the quick tier,
/// or with `every_variant` every generated variant too.
#[doc(hidden)]
pub fn shader_sources(every_variant: bool) -> Vec<(String, &'static str)> {
    kernels()
        .into_iter()
        .filter(|k| every_variant || k.tier == Tier::Quick)
        .map(|k| {
            let source = k.spec().source;
            (k.name, source)
        })
        .collect()
}

/// Every kernel's name, generated variants included (no source is generated).
#[doc(hidden)]
pub fn kernel_names() -> Vec<String> {
    kernels().into_iter().map(|k| k.name).collect()
}
