//! What Rust and WGSL must agree on, read from the shaders by naga rather than kept by
//! comments: each kernel's binding indices and access modes against its
//! [`KernelSpec`], each uniform struct's size and member offsets against its Rust
//! type, and the constants both sides declare.

use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};

use naga::{AddressSpace, Literal, Module, Scalar, ScalarKind, StorageAccess, TypeInner};

use crate::gpu::kernels::cast::{CastParams, WG as CAST_WG};
use crate::gpu::kernels::combine::COMBINE_SPEC;
use crate::gpu::kernels::launch::SplitParams;
use crate::gpu::kernels::linear::LinearParams;
use crate::gpu::kernels::params::{Params, FLAG_CAUSAL, FLAG_KV_LENS, FLAG_WRITE_LSE};
use crate::gpu::kernels::pipelines::{Binding, KernelSpec};
use crate::gpu::kernels::{
    cast, decode, decode_subgroup, fused, fused_lanes, fused_tiled, linear, pv, qk, softmax,
    source, weights,
};

/// Every kernel the library builds.
const SPECS: &[&KernelSpec] = &[
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
    &COMBINE_SPEC,
    &cast::SPEC,
    &linear::TILED_SPECS[0],
    &linear::TILED_SPECS[1],
    &linear::TILED_SPECS[2],
    &linear::TILED_SPECS[3],
    &linear::LANES_SPECS[0],
    &linear::LANES_SPECS[1],
    &linear::LANES_SPECS[2],
    &linear::LANES_SPECS[3],
];

fn parse(name: &str, source: &str) -> Module {
    naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)))
}

#[test]
fn every_shader_source_has_a_spec() {
    let specs: BTreeSet<&str> = SPECS.iter().map(|s| s.name).collect();
    let sources: BTreeSet<&str> = source::ALL.iter().map(|(n, _)| *n).collect();
    assert_eq!(specs, sources);
}

#[test]
fn bindings_match_the_specs() {
    for spec in SPECS {
        check_bindings(spec);
    }
}

/// The tiled kernel's sources are generated per variant (see `fused_tiled.rs`): each
/// must parse, validate (f16 and subgroups enabled as the variant needs) and bind as
/// its spec says. The quick tier: every element type, vec4 and subgroup setting with the
/// fewest and the most output chunks; the slow tier below takes every variant.
#[test]
fn tiled_variants_of_every_setting_validate_and_bind_as_specified() {
    for v in fused_tiled::all_variants() {
        if v.nv == 1 || v.nv == fused_tiled::MAX_NV {
            check_generated(fused_tiled::spec(v), fused_tiled::ROWS);
        }
    }
}

#[test]
#[ignore = "slow tier: validates every generated variant; .ci/run runs it"]
fn every_tiled_variant_validates_and_binds_as_specified() {
    for v in fused_tiled::all_variants() {
        check_generated(fused_tiled::spec(v), fused_tiled::ROWS);
    }
}

fn check_lanes(v: fused_lanes::Variant) {
    let shape = fused_lanes::LanesShape {
        sg: v.sg,
        rows: v.rows,
    };
    check_generated(fused_lanes::spec(v), shape.tile_rows());
}

/// As the tiled kernel's, for the lanes kernel: the quick tier takes every element
/// type, vec4 setting and subgroup size with the two smallest unrolled bodies.
#[test]
fn lanes_variants_of_every_setting_validate_and_bind_as_specified() {
    for v in fused_lanes::all_variants() {
        if v.rows * v.d4.max(v.dv4) <= 16 {
            check_lanes(v);
        }
    }
}

/// Every generated lanes variant parses, validates and binds as its spec says, and
/// declares the rows per workgroup the launcher dispatches for.
#[test]
#[ignore = "slow tier: validates every generated variant; .ci/run runs it"]
fn every_lanes_variant_validates_and_binds_as_specified() {
    for v in fused_lanes::all_variants() {
        check_lanes(v);
    }
}

/// A generated kernel binds as its spec says, validates with every capability, and
/// declares `rows` (rows per workgroup) as ROWS.
fn check_generated(spec: &KernelSpec, rows: u64) {
    check_bindings(spec);
    let module = parse(spec.name, spec.source);
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{}: {}", spec.name, e.emit_to_string(spec.source)));
    assert_eq!(
        wgsl_u32(spec.name, spec.source, "ROWS"),
        rows,
        "{}: ROWS, WGSL vs Rust",
        spec.name
    );
}

fn check_bindings(spec: &KernelSpec) {
    {
        let module = parse(spec.name, spec.source);
        let mut seen = vec![false; spec.bindings.len()];
        for (_, var) in module.global_variables.iter() {
            let Some(rb) = &var.binding else { continue };
            let name = var.name.as_deref().unwrap_or("?");
            let at = format!("{} binding {} ({name})", spec.name, rb.binding);
            assert_eq!(rb.group, 0, "{at}: kernels use bind group 0 only");
            let want = spec.bindings.get(rb.binding as usize).unwrap_or_else(|| {
                panic!("{at}: beyond the spec's {} bindings", spec.bindings.len())
            });
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
        // decode.wgsl and decode_subgroup.wgsl bind as fused.wgsl does (one list for every
        // first pass of split-KV) but write no lse: binding 7 is in their layout and not
        // in their source.
        let unused: &[usize] = if spec.name.starts_with("decode") {
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
}

/// The scalar kind of a Rust field, as WGSL must declare it.
trait WgslScalar {
    const KIND: ScalarKind;
}
impl WgslScalar for u32 {
    const KIND: ScalarKind = ScalarKind::Uint;
}
impl WgslScalar for i32 {
    const KIND: ScalarKind = ScalarKind::Sint;
}
impl WgslScalar for f32 {
    const KIND: ScalarKind = ScalarKind::Float;
}

fn kind_of<T: WgslScalar>(_: &T) -> ScalarKind {
    T::KIND
}

/// `(WGSL member name, byte offset, scalar kind)` of named scalar fields.
macro_rules! fields {
    ($t:ty; $($f:ident),* $(,)?) => {{
        let zero: $t = bytemuck::Zeroable::zeroed();
        vec![$((stringify!($f).to_string(), offset_of!($t, $f), kind_of(&zero.$f))),*]
    }};
}

/// The members of an array field `f: [u32; N]` as WGSL spells them: `names[i]` at
/// `offset + 4 i`.
fn array_fields(offset: usize, names: &[&str]) -> Vec<(String, usize, ScalarKind)> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), offset + 4 * i, ScalarKind::Uint))
        .collect()
}

/// Checks the WGSL struct `name` in `source` against `size` and `fields`.
fn check_struct(source: &str, name: &str, size: usize, fields: &[(String, usize, ScalarKind)]) {
    let module = parse(name, source);
    let (_, ty) = module
        .types
        .iter()
        .find(|(_, t)| t.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no WGSL struct {name}"));
    let TypeInner::Struct { members, span } = &ty.inner else {
        panic!("{name} is not a struct");
    };
    assert_eq!(*span as usize, size, "{name}: WGSL size vs Rust size_of");
    let got: Vec<(String, usize, ScalarKind)> = members
        .iter()
        .map(|m| {
            let kind = match module.types[m.ty].inner {
                TypeInner::Scalar(Scalar { kind, width: 4 }) => kind,
                ref other => panic!("{name}.{:?}: not a 4-byte scalar: {other:?}", m.name),
            };
            (m.name.clone().unwrap_or_default(), m.offset as usize, kind)
        })
        .collect();
    assert_eq!(
        got, fields,
        "{name}: members (name, offset, kind), WGSL vs Rust"
    );
}

#[test]
fn uniform_structs_match_their_rust_types() {
    check_struct(
        source::QK,
        "Params",
        size_of::<Params>(),
        &fields!(Params; len_q, len_k, dim, dim_v, heads_q, heads_kv, group, bh_start,
            bh_count, row_start, row_count, q_base, k_base, v_base, o_base, lse_base,
            mask_base, mask_stride_b, mask_stride_h, mask_stride_i, mask_stride_j,
            mask_kind, flags, pos_offset, win_left, win_right, scale, w_base),
    );
    check_struct(
        source::COMBINE,
        "Split",
        size_of::<SplitParams>(),
        &fields!(SplitParams; splits, split_len, key_lo, key_hi, kv_first, kv_count,
            row_tiles, ml_base),
    );
    let mut cast = fields!(CastParams; count);
    cast.extend(array_fields(
        offset_of!(CastParams, _pad),
        &["_pad0", "_pad1", "_pad2"],
    ));
    check_struct(source::TO_F16, "Cast", size_of::<CastParams>(), &cast);
    let mut lin = fields!(LinearParams; rows, cols, inner, tiles_n);
    let layout = |p: &str| ["len", "heads", "dim", "cap", "off"].map(|f| format!("{p}_{f}"));
    let (input, output) = (layout("in"), layout("out"));
    let (input, output) = (
        input.each_ref().map(String::as_str),
        output.each_ref().map(String::as_str),
    );
    lin.extend(array_fields(offset_of!(LinearParams, input), &input));
    lin.extend(array_fields(offset_of!(LinearParams, output), &output));
    lin.extend(fields!(LinearParams; flags, _pad0));
    // Every dense-layer source concatenates the same prelude: one of each kernel.
    for src in [source::MATMUL_TILED, source::MATMUL_LANES_SCALAR_F16] {
        check_struct(src, "Linear", size_of::<LinearParams>(), &lin);
    }
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
    let mut shapes = vec![LinearShape::Tiled];
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
    for &(kernel, source, name, rust) in cases {
        assert_eq!(
            wgsl_u32(kernel, source, name),
            rust,
            "{kernel}: {name}, WGSL vs Rust"
        );
    }
}
