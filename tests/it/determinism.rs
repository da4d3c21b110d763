//! The same inputs give bitwise-identical outputs, run after run, on every path; and no
//! kernel reduces with floating-point atomics (whose order, and so whose rounding,
//! changes from run to run).

use crate::common::*;
use ndarray::Array;
use wgpu_attention::*;

fn hundred_runs_agree(what: &str, ctx: &GpuContext, opts: &AttentionOptions<'_>) {
    hundred_runs_agree_at(what, ctx, opts, (19, 37));
}

fn hundred_runs_agree_at(
    what: &str,
    ctx: &GpuContext,
    opts: &AttentionOptions<'_>,
    (lq, lk): (usize, usize),
) {
    let (q, k, v) = qkv(41, (2, 4, 2), (lq, lk), (24, 20));
    let first = output_bits(&attention(ctx, q.view(), k.view(), v.view(), opts).unwrap());
    for run in 1..100 {
        let again = output_bits(&attention(ctx, q.view(), k.view(), v.view(), opts).unwrap());
        if let Some(i) = (0..first.len()).find(|&i| first[i] != again[i]) {
            panic!(
                "{what}: run {run} differs at flat element {i}: {} vs {}",
                f32::from_bits(first[i]),
                f32::from_bits(again[i])
            );
        }
    }
}

#[test]
fn staged_path_is_bitwise_reproducible() {
    let bias = Array::from_shape_fn((19, 37), |(i, j)| ((i * 7 + j * 3) % 5) as f32 - 2.0);
    for path in [KernelPath::Auto, KernelPath::Staged] {
        let opts = AttentionOptions {
            causal: true,
            alignment: Alignment::BottomRight,
            mask: Some(Mask::Additive(bias.view().into_dyn())),
            return_weights: true,
            return_lse: true,
            path,
            ..Default::default()
        };
        hundred_runs_agree(&format!("{path:?}"), ctx(), &opts);
    }
}

#[test]
fn default_path_without_weights_is_bitwise_reproducible() {
    // Without weights the automatic choice is free to take a kernel that never forms
    // the score matrix; whichever it takes must repeat itself exactly.
    let opts = AttentionOptions {
        causal: true,
        return_lse: true,
        ..Default::default()
    };
    hundred_runs_agree("auto, out and lse", ctx(), &opts);
    let opts = AttentionOptions::default();
    hundred_runs_agree("auto, out only", ctx(), &opts);
}

#[test]
fn fused_and_decode_paths_are_bitwise_reproducible() {
    // 3,000 keys: the decode path merges several key ranges per row, in a fixed order.
    for path in [KernelPath::Fused, KernelPath::Decode] {
        let opts = AttentionOptions {
            causal: true,
            alignment: Alignment::BottomRight,
            return_lse: true,
            path,
            ..Default::default()
        };
        hundred_runs_agree_at(&format!("{path:?}"), ctx(), &opts, (3, 3000));
    }
}

#[test]
fn split_staged_path_is_bitwise_reproducible() {
    // Small bindings: one head per chunk, sixteen dispatches of each kernel per run.
    let ctx = GpuContext::new()
        .expect("no GPU adapter")
        .with_max_binding(3_600);
    let opts = AttentionOptions {
        return_weights: true,
        return_lse: true,
        path: KernelPath::Staged,
        ..Default::default()
    };
    hundred_runs_agree("staged, split", &ctx, &opts);
}

/// Why `source` may reduce non-deterministically, if it may.
fn float_atomic_use(source: &str) -> Option<String> {
    use naga::{Statement, TypeInner};
    let module = match naga::front::wgsl::parse_str(source) {
        Ok(m) => m,
        Err(e) => return Some(e.emit_to_string(source)),
    };
    for (_, ty) in module.types.iter() {
        if let TypeInner::Atomic(scalar) = ty.inner {
            if scalar.kind == naga::ScalarKind::Float {
                return Some("declares a floating-point atomic".into());
            }
        }
    }
    // WGSL has no float atomic add; the way to fake one is a compare-exchange loop on
    // the bits. Integer atomics (counters) are order-independent and allowed.
    let functions = module
        .functions
        .iter()
        .map(|(_, f)| f)
        .chain(module.entry_points.iter().map(|e| &e.function));
    for f in functions {
        let mut stack: Vec<&naga::Block> = vec![&f.body];
        while let Some(block) = stack.pop() {
            for st in block.iter() {
                match st {
                    Statement::Atomic {
                        fun: naga::AtomicFunction::Exchange { compare: Some(_) },
                        ..
                    } => return Some("compare-exchange loop (an emulated float atomic?)".into()),
                    Statement::Block(b) => stack.push(b),
                    Statement::If { accept, reject, .. } => stack.extend([accept, reject]),
                    Statement::Loop {
                        body, continuing, ..
                    } => stack.extend([body, continuing]),
                    Statement::Switch { cases, .. } => stack.extend(cases.iter().map(|c| &c.body)),
                    _ => {}
                }
            }
        }
    }
    None
}

#[test]
fn no_kernel_uses_floating_point_atomics() {
    for (name, source) in shader_sources(true) {
        if let Some(why) = float_atomic_use(source) {
            panic!("{name}: {why}");
        }
    }
}

#[test]
fn the_float_atomic_check_sees_a_compare_exchange_loop() {
    let emulated_add = r#"
        @group(0) @binding(0) var<storage, read_write> total: atomic<u32>;
        @compute @workgroup_size(64)
        fn main(@builtin(local_invocation_index) i: u32) {
            var old = atomicLoad(&total);
            loop {
                let new = bitcast<u32>(bitcast<f32>(old) + f32(i));
                let r = atomicCompareExchangeWeak(&total, old, new);
                if r.exchanged { break; }
                old = r.old_value;
            }
        }
    "#;
    assert!(float_atomic_use(emulated_add).is_some());
    let counter = r#"
        @group(0) @binding(0) var<storage, read_write> n: atomic<u32>;
        @compute @workgroup_size(64)
        fn main() { atomicAdd(&n, 1u); }
    "#;
    assert_eq!(float_atomic_use(counter), None);
}
