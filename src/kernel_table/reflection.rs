//! What Rust and WGSL must agree on, read from the shaders by naga rather than kept by
//! comments, for every kernel of the table: it parses and validates with exactly the
//! capabilities it declares, its binding indices and access modes match its
//! [`KernelSpec`], each uniform struct's size and members match the Rust type its spec
//! names, a generated kernel declares the rows its launcher dispatches for, and the
//! constants both sides declare agree.

use std::collections::BTreeSet;
use std::path::Path;

use naga::{AddressSpace, Literal, Module, Scalar, StorageAccess, TypeInner};

use super::{kernels, Kernel, Tier};
use crate::gpu::kernels::cast::WG as CAST_WG;
use crate::gpu::kernels::layout::{ScalarKind, UniformLayout};
use crate::gpu::kernels::params::{FLAG_CAUSAL, FLAG_KV_LENS, FLAG_WRITE_LSE};
use crate::gpu::kernels::pipelines::{Binding, KernelSpec};
use crate::gpu::kernels::{
    decode, decode_subgroup, fused, linear, pv, qk, source, subgroups, weights,
};

fn parse(name: &str, source: &str) -> Module {
    naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)))
}

/// The capabilities a kernel declares: f16 storage where its source enables f16, subgroup
/// operations where it starts with the subgroup prelude (the recipe's one rule), on top of
/// what core WGSL guarantees every device (`pack2x16float`, which naga counts as a
/// capability). Nothing else: a kernel that uses more fails to validate.
fn declared_capabilities(source: &str) -> naga::valid::Capabilities {
    use naga::valid::Capabilities;
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if source.lines().any(|l| l.trim() == "enable f16;") {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if source.starts_with(subgroups::PRELUDE) {
        caps |= Capabilities::SUBGROUP;
    }
    caps
}

/// The one validation every kernel gets: parsed, then validated with every check and
/// exactly its declared capabilities.
fn validate(name: &str, source: &str) -> Module {
    let module = parse(name, source);
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        declared_capabilities(source),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    module
}

/// Everything the table promises about one kernel.
fn check_kernel(kernel: &Kernel) {
    let spec = kernel.spec();
    assert_eq!(spec.name, kernel.name, "the table's name is the cache's");
    let module = validate(spec.name, spec.source);
    check_bindings(spec, &module);
    check_uniforms(spec, &module);
    if let Some(rows) = kernel.rows {
        assert_eq!(
            wgsl_u32(spec.name, spec.source, "ROWS"),
            rows,
            "{}: ROWS, WGSL vs Rust",
            spec.name
        );
    }
}

#[test]
fn quick_tier_kernels_validate_bind_and_match_their_uniforms() {
    let all = kernels();
    let quick: Vec<&Kernel> = all.iter().filter(|k| k.tier == Tier::Quick).collect();
    // Every fixed kernel, and some of each generated one.
    assert!(quick.len() >= 41, "{} quick kernels", quick.len());
    for k in quick {
        check_kernel(k);
    }
}

#[test]
#[ignore = "slow tier: validates every generated variant; .ci/run runs it"]
fn every_kernel_validates_binds_and_matches_its_uniforms() {
    for k in kernels() {
        check_kernel(&k);
    }
}

#[test]
fn kernel_names_are_unique() {
    let mut seen = BTreeSet::new();
    for k in kernels() {
        assert!(seen.insert(k.name.clone()), "{} listed twice", k.name);
    }
}

/// Every WGSL file under `shaders/` is part of some kernel's recipe (named in a
/// `kernel_wgsl!` or `shader_file!` of the source), so none is left out of the table.
#[test]
fn every_shader_file_is_used() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut rust = String::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                rust.push_str(&std::fs::read_to_string(&path).expect("read"));
            }
        }
    }
    for folder in ["kernels", "model", "prelude"] {
        for entry in std::fs::read_dir(root.join("shaders").join(folder))
            .expect("shaders")
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".wgsl") {
                let path = format!("\"{folder}/{name}\"");
                assert!(
                    rust.contains(&path),
                    "shaders/{folder}/{name} is in no kernel's recipe"
                );
            }
        }
    }
}

fn check_bindings(spec: &KernelSpec, module: &Module) {
    let mut seen = vec![false; spec.bindings.len()];
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        let name = var.name.as_deref().unwrap_or("?");
        let at = format!("{} binding {} ({name})", spec.name, rb.binding);
        assert_eq!(rb.group, 0, "{at}: kernels use bind group 0 only");
        let want = spec
            .bindings
            .get(rb.binding as usize)
            .unwrap_or_else(|| panic!("{at}: beyond the spec's {} bindings", spec.bindings.len()));
        let got = match var.space {
            AddressSpace::Uniform => Binding::Uniform,
            AddressSpace::Storage { access } if access == StorageAccess::LOAD => Binding::Read,
            AddressSpace::Storage { access }
                if access.contains(StorageAccess::LOAD | StorageAccess::STORE) =>
            {
                Binding::ReadWrite
            }
            other => panic!("{at}: unexpected address space {other:?}"),
        };
        assert_eq!(got, *want, "{at}");
        seen[rb.binding as usize] = true;
    }
    let missing: Vec<usize> = (0..seen.len()).filter(|&i| !seen[i]).collect();
    // decode_subgroup.wgsl binds as fused.wgsl does (one list for every first pass of
    // split-KV) but writes no lse: binding 7 is in its layout and not in its source
    // (decode.wgsl writes it when DIRECT).
    let unused: &[usize] = if spec.name.starts_with("decode_subgroup") {
        &[7]
    } else {
        &[]
    };
    assert_eq!(
        missing, unused,
        "{}: spec bindings the WGSL does not declare",
        spec.name
    );
}

/// Each uniform binding's WGSL struct against the layout the spec names for it, in
/// binding order.
fn check_uniforms(spec: &KernelSpec, module: &Module) {
    let uniform_bindings: Vec<usize> = (0..spec.bindings.len())
        .filter(|&i| spec.bindings[i] == Binding::Uniform)
        .collect();
    assert_eq!(
        uniform_bindings.len(),
        spec.uniforms.len(),
        "{}: one Rust layout per uniform binding",
        spec.name
    );
    for (&at, layout) in uniform_bindings.iter().zip(spec.uniforms) {
        let var = module
            .global_variables
            .iter()
            .find(|(_, v)| v.binding.as_ref().is_some_and(|b| b.binding as usize == at));
        // A binding in the layout that the source leaves out (decode's lse) has no struct.
        let Some((_, var)) = var else { continue };
        check_struct(spec.name, module, var.ty, &layout());
    }
}

/// The WGSL struct `ty` of `module` against `layout`: its name, size and every member's
/// name, offset and scalar kind.
fn check_struct(
    kernel: &str,
    module: &Module,
    ty: naga::Handle<naga::Type>,
    layout: &UniformLayout,
) {
    let ty = &module.types[ty];
    let name = ty.name.as_deref().unwrap_or("?");
    let at = format!("{kernel}: uniform {name}");
    assert_eq!(name, layout.wgsl, "{at}: WGSL struct vs the Rust layout's");
    let TypeInner::Struct { members, span } = &ty.inner else {
        panic!("{at} is not a struct");
    };
    assert_eq!(
        *span as usize, layout.size,
        "{at}: WGSL size vs Rust size_of"
    );
    let got: Vec<(String, usize, ScalarKind)> = members
        .iter()
        .map(|m| {
            let kind = match module.types[m.ty].inner {
                TypeInner::Scalar(Scalar {
                    kind: naga::ScalarKind::Uint,
                    width: 4,
                }) => ScalarKind::U32,
                TypeInner::Scalar(Scalar {
                    kind: naga::ScalarKind::Sint,
                    width: 4,
                }) => ScalarKind::I32,
                TypeInner::Scalar(Scalar {
                    kind: naga::ScalarKind::Float,
                    width: 4,
                }) => ScalarKind::F32,
                // A block of f32 or u32 vectors (the quantized matmul's copy of x, a page
                // of W), whose extent the struct's size checks.
                TypeInner::Array { base, .. } => match module.types[base].inner {
                    TypeInner::Vector {
                        scalar:
                            Scalar {
                                kind: naga::ScalarKind::Float,
                                width: 4,
                            },
                        ..
                    } => ScalarKind::F32,
                    TypeInner::Vector {
                        scalar:
                            Scalar {
                                kind: naga::ScalarKind::Uint,
                                width: 4,
                            },
                        ..
                    } => ScalarKind::U32,
                    ref other => panic!("{at}.{:?}: an array of {other:?}", m.name),
                },
                ref other => panic!("{at}.{:?}: not a 4-byte scalar: {other:?}", m.name),
            };
            (m.name.clone().unwrap_or_default(), m.offset as usize, kind)
        })
        .collect();
    assert_eq!(
        got, layout.members,
        "{at}: members (name, offset, kind), WGSL vs Rust"
    );
}

/// The check sees a Rust layout that disagrees with the WGSL: two members swapped.
#[test]
#[should_panic(expected = "members (name, offset, kind), WGSL vs Rust")]
fn a_uniform_layout_that_disagrees_is_caught() {
    let module = parse("qk", source::QK);
    let (_, var) = module
        .global_variables
        .iter()
        .find(|(_, v)| v.space == AddressSpace::Uniform)
        .expect("qk has a uniform");
    let mut layout = crate::gpu::kernels::params::params_uniform();
    layout.members.swap(0, 1);
    check_struct("qk", &module, var.ty, &layout);
}

/// The value of the WGSL `const` (or the default of the `override`) `name`.
fn wgsl_u32(kernel: &str, source: &str, name: &str) -> u64 {
    let module = parse(kernel, source);
    let init = module
        .constants
        .iter()
        .find(|(_, c)| c.name.as_deref() == Some(name))
        .map(|(_, c)| c.init)
        .or_else(|| {
            module
                .overrides
                .iter()
                .find(|(_, o)| o.name.as_deref() == Some(name))
                .and_then(|(_, o)| o.init)
        })
        .unwrap_or_else(|| panic!("{kernel}: no constant {name}"));
    match module.global_expressions[init] {
        naga::Expression::Literal(Literal::U32(v)) => u64::from(v),
        naga::Expression::Literal(Literal::AbstractInt(v)) => v as u64,
        ref other => panic!("{kernel}: {name} is not a u32 literal: {other:?}"),
    }
}

/// Every override constant a dense-layer shape sets is declared by its kernel, with a
/// default inside the range the shapes use.
#[test]
fn linear_shapes_set_declared_overrides() {
    use crate::gpu::kernels::linear::LinearShape;
    let mut shapes = vec![
        LinearShape::Tiled,
        LinearShape::Split { rows: 1 },
        LinearShape::Split { rows: 4 },
    ];
    for row_groups in 1..=4 {
        for col_sets in 1..=2 {
            shapes.push(LinearShape::Lanes {
                row_groups,
                col_sets,
            });
        }
    }
    for shape in shapes {
        let spec = shape.spec(crate::gpu::kernels::elem::Elem::F32, true);
        let module = parse(spec.name, spec.source);
        for (name, _) in shape.constants() {
            assert!(
                module
                    .overrides
                    .iter()
                    .any(|(_, o)| o.name.as_deref() == Some(name)),
                "{}: no override {name}",
                spec.name
            );
        }
    }
    assert_eq!(
        wgsl_u32("matmul_lanes", source::MATMUL_LANES, "ROW_GROUPS"),
        2
    );
    assert_eq!(
        wgsl_u32("matmul_lanes", source::MATMUL_LANES, "COL_SETS"),
        1
    );
}

#[test]
fn shared_constants_match() {
    let cases: &[(&str, &str, &str, u64)] = &[
        ("fused", source::FUSED, "REG4", fused::REG4),
        ("fused", source::FUSED, "SREG", fused::SREG.into()),
        ("fused", source::FUSED, "ROWS_MAX", fused::ROWS_MAX.into()),
        (
            "decode",
            source::DECODE,
            "ROWS_MAX",
            decode::ROWS_MAX.into(),
        ),
        (
            "decode",
            source::DECODE,
            "Q4_PRIVATE",
            decode::Q4_PRIVATE.into(),
        ),
        (
            "decode_subgroup",
            source::DECODE_SUBGROUP,
            "ROWS_MAX",
            decode_subgroup::ROWS_MAX.into(),
        ),
        (
            "decode_subgroup",
            source::DECODE_SUBGROUP,
            "REG4_MAX",
            decode_subgroup::REG4_MAX.into(),
        ),
        (
            "combine",
            source::COMBINE,
            "WG",
            crate::gpu::kernels::combine::COMBINE_WG.into(),
        ),
        ("qk", source::QK, "TILE", qk::TILE),
        ("pv", source::PV, "TILE", pv::TILE),
        ("weights", source::WEIGHTS, "WG", weights::WG),
        ("weights", source::WEIGHTS, "KEYS", weights::KEYS),
        ("weights", source::WEIGHTS, "SEGMENT", weights::SEGMENT),
        (
            "weights",
            source::WEIGHTS,
            "SCALE_KEYS",
            weights::SCALE_KEYS,
        ),
        (
            "matmul_tiled",
            source::MATMUL_TILED,
            "TS",
            linear::TILED_TILE,
        ),
        (
            "matmul_lanes",
            source::MATMUL_LANES,
            "SG",
            linear::LANES_SG.into(),
        ),
        // Four columns a group.
        (
            "matmul_split",
            source::MATMUL_SPLIT,
            "GROUPS",
            linear::SPLIT_COLS / 4,
        ),
        (
            "matmul_lanes",
            source::MATMUL_LANES,
            "LINEAR_RESIDUAL",
            linear::FLAG_RESIDUAL.into(),
        ),
        (
            "matmul_tiled",
            source::MATMUL_TILED,
            "LINEAR_GELU",
            linear::FLAG_GELU.into(),
        ),
        ("to_f16", source::TO_F16, "WG", CAST_WG),
        ("qk", source::QK, "FLAG_CAUSAL", FLAG_CAUSAL.into()),
        ("qk", source::QK, "FLAG_KV_LENS", FLAG_KV_LENS.into()),
        ("qk", source::QK, "FLAG_WRITE_LSE", FLAG_WRITE_LSE.into()),
    ];
    for &(kernel, source, name, rust) in cases.iter().chain(&crate::model::ops::shared_constants())
    {
        assert_eq!(
            wgsl_u32(kernel, source, name),
            rust,
            "{kernel}: {name}, WGSL vs Rust"
        );
    }
}
