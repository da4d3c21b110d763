//! The README's table of rejected inputs, row by row: each input gets exactly the error
//! kind and message the table shows.

use crate::common::*;
use ndarray::{Array4, ArrayD, IxDyn};
use wgpu_attention::*;

/// The table's rows: (case, error kind, message).
fn table() -> Vec<(String, String, String)> {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("## Rejected inputs")
        .expect("README has a rejected-inputs section");
    readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| case"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let case = cells[0].trim_start_matches("| ").to_string();
            let last = cells[cells.len() - 1].trim_end_matches(" |");
            let ticks: Vec<&str> = last.split('`').collect();
            (case, ticks[1].to_string(), ticks[3].to_string())
        })
        .collect()
}

fn z(shape: (usize, usize, usize, usize)) -> Array4<f32> {
    Array4::zeros(shape)
}

fn upload(a: &Array4<f32>) -> GpuTensor {
    GpuTensor::from_array(ctx(), a.view().into_dyn()).unwrap()
}

fn into(
    q: &Array4<f32>,
    k: &Array4<f32>,
    opts: &AttentionOptions<'_>,
    out: GpuOutputs,
) -> AttentionError {
    let (qt, kt) = (upload(q), upload(k));
    pollster::block_on(attention_gpu_into_async(ctx(), &qt, &kt, &kt, opts, &out)).unwrap_err()
}

fn error_for(case: &str) -> AttentionError {
    let d = AttentionOptions::default();
    let (q, k) = (z((1, 2, 5, 8)), z((1, 2, 7, 8)));
    match case {
        "rank" => {
            let q3 = ArrayD::<f32>::zeros(IxDyn(&[2, 5, 8]));
            validate(q3.shape(), k.shape(), k.shape(), &d).unwrap_err()
        }
        "empty batch" => rejected_alike(&z((0, 2, 5, 8)), &k, &k, &d),
        "batch" => rejected_alike(&q, &z((2, 2, 7, 8)), &z((2, 2, 7, 8)), &d),
        "head dim" => rejected_alike(&q, &z((1, 2, 7, 16)), &k, &d),
        "value shape" => rejected_alike(&q, &k, &z((1, 2, 6, 8)), &d),
        "heads" => rejected_alike(&z((1, 3, 5, 8)), &k, &k, &d),
        "sequence length" => validate(&[1, 2, 1 << 30, 8], k.shape(), k.shape(), &d).unwrap_err(),
        "scale" => rejected_alike(
            &q,
            &k,
            &k,
            &AttentionOptions {
                scale: Some(f32::NAN),
                ..d
            },
        ),
        "mask rank" | "mask broadcast" => {
            let shape: &[usize] = if case == "mask rank" { &[7] } else { &[4, 7] };
            let m = ArrayD::from_elem(IxDyn(shape), true);
            let opts = AttentionOptions {
                mask: Some(Mask::Bool(m.view())),
                ..d
            };
            rejected_alike(&q, &k, &k, &opts)
        }
        "mask value" => {
            let mut m = ArrayD::<f32>::zeros(IxDyn(&[5, 7]));
            m[[1, 0]] = f32::INFINITY;
            let opts = AttentionOptions {
                mask: Some(Mask::Additive(m.view())),
                ..d
            };
            rejected_alike(&q, &k, &k, &opts)
        }
        "key lengths count" => rejected_alike(
            &q,
            &k,
            &k,
            &AttentionOptions {
                kv_lens: Some(&[7, 7]),
                ..d
            },
        ),
        "key length" => rejected_alike(
            &q,
            &k,
            &k,
            &AttentionOptions {
                kv_lens: Some(&[8]),
                ..d
            },
        ),
        "output shape" => {
            let out = GpuOutputs {
                out: GpuTensor::empty(ctx(), &[1, 2, 5, 4]).unwrap(),
                weights: None,
                lse: None,
            };
            into(&q, &k, &d, out)
        }
        "missing output" => {
            let out = GpuOutputs {
                out: GpuTensor::empty(ctx(), &[1, 2, 5, 8]).unwrap(),
                weights: None,
                lse: None,
            };
            let opts = AttentionOptions {
                return_weights: true,
                ..d
            };
            into(&q, &k, &opts, out)
        }
        "aliased output" => {
            let t = upload(&q);
            let out = GpuOutputs {
                out: t.clone(),
                weights: None,
                lse: None,
            };
            let kt = upload(&k);
            pollster::block_on(attention_gpu_into_async(ctx(), &t, &kt, &kt, &d, &out)).unwrap_err()
        }
        "buffer too small" | "buffer usage" => {
            let (size, usage) = if case == "buffer too small" {
                (64, wgpu::BufferUsages::STORAGE)
            } else {
                (1024, wgpu::BufferUsages::UNIFORM)
            };
            let b = ctx().device().create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            });
            GpuTensor::from_buffer(b, &[1, 1, 4, 8]).unwrap_err()
        }
        "tensor beyond the device" => {
            let ctx = context_with_limits(|l| wgpu::Limits {
                max_buffer_size: 1 << 20,
                max_storage_buffer_binding_size: 1 << 20,
                ..l
            });
            let (q, k) = (z((1, 8, 256, 256)), z((1, 8, 4, 256)));
            attention(&ctx, q.view(), k.view(), k.view(), &d).unwrap_err()
        }
        "element count overflow" => GpuTensor::empty(ctx(), &[usize::MAX, 4]).unwrap_err(),
        "one head beyond a binding" => {
            let ctx = GpuContext::new().unwrap().with_max_binding(256);
            let (q, k) = (z((1, 1, 4, 64)), z((1, 1, 100, 64)));
            attention(&ctx, q.view(), k.view(), k.view(), &d).unwrap_err()
        }
        "workgroup grid" => {
            let ctx = context_with_limits(|l| wgpu::Limits {
                max_compute_workgroups_per_dimension: 100,
                ..l
            });
            // The staged path launches one softmax workgroup per row.
            let staged = AttentionOptions {
                path: KernelPath::Staged,
                ..Default::default()
            };
            let (q, k) = (z((1, 1, 10_001, 4)), z((1, 1, 3, 4)));
            attention(&ctx, q.view(), k.view(), k.view(), &staged).unwrap_err()
        }
        other => panic!("README row {other:?} has no case in tests/rejected.rs"),
    }
}

#[test]
fn every_row_of_the_readme_table_holds() {
    let rows = table();
    assert!(rows.len() >= 20, "table not found or short: {rows:?}");
    for (case, kind, message) in rows {
        let e = error_for(&case);
        let debug = format!("{e:?}");
        assert!(
            debug.starts_with(&kind),
            "{case}: README says {kind}, got {debug}"
        );
        assert_eq!(
            e.to_string(),
            message,
            "{case}: message differs from the README"
        );
        assert!(e.is_input_error(), "{case}: {e} is an input error");
    }
}

/// Both CPU paths hold only the outputs asked for; weights that memory cannot hold
/// are a typed error, not an abort.
#[test]
fn cpu_weights_beyond_memory_are_too_large() {
    let q = ndarray::Array4::<f32>::zeros((1, 1, 1 << 20, 1));
    let opts = AttentionOptions {
        return_weights: true,
        ..Default::default()
    };
    for e in [
        attention_reference(q.view(), q.view(), q.view(), &opts).unwrap_err(),
        attention_cpu(q.view(), q.view(), q.view(), &opts).unwrap_err(),
    ] {
        assert!(
            matches!(e, AttentionError::TooLarge { arg: "weights", .. }),
            "{e}"
        );
    }
}

#[test]
fn validate_refuses_element_counts_that_overflow() {
    let big = usize::MAX / 2;
    let e = validate(
        &[big, 4, 1, 1],
        &[big, 4, 1, 1],
        &[big, 4, 1, 1],
        &Default::default(),
    )
    .unwrap_err();
    assert!(matches!(e, AttentionError::TooLarge { .. }), "{e}");
}
