//! Checks over every WGSL kernel's text, and that the pipeline cache builds only what the
//! kernel table lists. (Parsing, validation and the Rust/WGSL agreement of every kernel
//! are the library's unit tests, `src/kernel_table/reflection.rs`.)

use crate::common::*;
use wgpu_attention::{attention_async, AttentionOptions, KernelPath, Precision};

/// WGSL makes a constant expression that evaluates to inf or NaN a shader-creation error.
/// naga accepts it, but browsers' compilers reject the module, so the bit patterns must go
/// through a runtime value (the prelude's `neg_inf()` and `quiet_nan()`).
#[test]
fn no_shader_bitcasts_a_literal_to_a_float() {
    for (name, source) in wgpu_attention::shader_sources(true) {
        for (n, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("bitcast<f32>(") {
                let arg = code[at + "bitcast<f32>(".len()..].trim_start();
                assert!(
                    !arg.starts_with(|c: char| c.is_ascii_digit()),
                    "{name}:{}: bitcast of a literal is a constant expression: {line}",
                    n + 1
                );
            }
        }
    }
}

/// The kernels the common paths build (staged, fused, decode, f16 where the adapter has
/// it, with weights) are all in the table, as is everything other tests built before.
#[test]
fn pipelines_built_are_in_the_kernel_table() {
    let (q, k, v) = qkv(7, (1, 2, 2), (5, 9), (8, 8));
    let (q1, k1, v1) = qkv(8, (1, 2, 2), (1, 40), (8, 8));
    let f16 = ctx().features().contains(wgpu::Features::SHADER_F16);
    let cases: Vec<(&str, AttentionOptions<'_>)> = vec![
        (
            "auto with weights",
            AttentionOptions {
                return_weights: true,
                ..Default::default()
            },
        ),
        (
            "staged",
            AttentionOptions {
                path: KernelPath::Staged,
                ..Default::default()
            },
        ),
        (
            "fused",
            AttentionOptions {
                path: KernelPath::Fused,
                ..Default::default()
            },
        ),
        (
            "f16",
            AttentionOptions {
                precision: if f16 { Precision::F16 } else { Precision::F32 },
                ..Default::default()
            },
        ),
    ];
    for (what, opts) in &cases {
        pollster::block_on(attention_async(ctx(), q.view(), k.view(), v.view(), opts))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    pollster::block_on(attention_async(
        ctx(),
        q1.view(),
        k1.view(),
        v1.view(),
        &AttentionOptions::default(),
    ))
    .expect("decode");
    assert_built_kernels_are_listed();
}
