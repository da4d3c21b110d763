//! Multi-head attention with projections: the GPU path (outputs NaN-prefilled) against
//! the f64 CPU path at shapes that straddle the linear kernel's 16-wide tiles, both
//! backends against JAX fixtures (`tests/fixtures/mha/generate.py`), incremental
//! decoding against the full causal run, and the typed errors.

use std::path::{Path, PathBuf};

use crate::common::*;
use ndarray::{Array1, Array2, Array3, ArrayD, Axis, IxDyn};
use ndarray_npy::read_npy;
use serde_json::Value;
use wgpu_attention::{
    mha, mha_cpu, mha_gpu_into_async, mha_incremental, mha_step_into_async, AttentionError,
    GpuContext, GpuTensor, HeadWeights, KvCache, MhaGpuOutputs, MhaGpuWeights, MhaOptions,
    MhaOutput, MhaWeights, Projections,
};

/// Random weights for E, Ekv, H and N, with or without biases.
fn weights(seed: u64, (e, ekv): (usize, usize), (h, n): (usize, usize), bias: bool) -> MhaWeights {
    let mut r = Rng::new(seed);
    let kv = n * (e / h);
    let mut m = |rows: usize, cols: usize| {
        let s = 1.0 / (cols as f32).sqrt();
        Array2::from_shape_simple_fn((rows, cols), || r.normal() * s)
    };
    let (q_weight, k_weight, v_weight, out_weight) = (m(e, e), m(kv, ekv), m(kv, ekv), m(e, e));
    let mut b = |len: usize| bias.then(|| Array1::from_shape_simple_fn(len, || r.normal() * 0.1));
    MhaWeights::new(
        Projections {
            q_weight,
            q_bias: b(e),
            k_weight,
            k_bias: b(kv),
            v_weight,
            v_bias: b(kv),
            out_weight,
            out_bias: b(e),
        },
        h,
        Some(n),
    )
    .unwrap()
}

fn array3(seed: u64, shape: (usize, usize, usize)) -> Array3<f32> {
    let mut r = Rng::new(seed);
    Array3::from_shape_simple_fn(shape, || r.normal())
}

fn nan(shape: &[usize]) -> GpuTensor {
    GpuTensor::from_array(ctx(), ArrayD::from_elem(IxDyn(shape), f32::NAN).view()).unwrap()
}

fn average(w: ArrayD<f32>) -> ArrayD<f32> {
    w.mean_axis(Axis(1)).unwrap()
}

/// The GPU path writing into NaN-filled outputs, read back.
fn gpu_nan_prefilled(
    w: &MhaWeights,
    x: &Array3<f32>,
    kv: Option<&Array3<f32>>,
    opts: &MhaOptions<'_>,
) -> MhaOutput {
    let ctx = ctx();
    let gw = MhaGpuWeights::upload(ctx, w).unwrap();
    let (b, l, e) = x.dim();
    let s = kv.map_or(l, |a| a.dim().1);
    let h = w.dims().heads;
    let outputs = MhaGpuOutputs {
        y: nan(&[b, l, e]),
        weights: (opts.weights != HeadWeights::None).then(|| nan(&[b, h, l, s])),
    };
    let xt = GpuTensor::from_array(ctx, x.view().into_dyn()).unwrap();
    let kvt = kv.map(|a| GpuTensor::from_array(ctx, a.view().into_dyn()).unwrap());
    pollster::block_on(mha_gpu_into_async(
        ctx,
        &gw,
        &xt,
        kvt.as_ref(),
        opts,
        &outputs,
    ))
    .unwrap_or_else(|e| panic!("gpu: {e}"));
    let y = outputs.y.read(ctx).unwrap().into_dimensionality().unwrap();
    let weights = outputs.weights.map(|t| {
        let per_head = t.read(ctx).unwrap();
        match opts.weights {
            HeadWeights::Averaged => average(per_head),
            _ => per_head,
        }
    });
    MhaOutput { y, weights }
}

fn compare(what: &str, got: &MhaOutput, want: &MhaOutput) {
    assert_close(
        &format!("{what}: y"),
        got.y.view(),
        want.y.view(),
        ATOL,
        RTOL,
    );
    match (&got.weights, &want.weights) {
        (Some(g), Some(w)) => {
            assert_close(&format!("{what}: weights"), g.view(), w.view(), ATOL, RTOL)
        }
        (None, None) => {}
        _ => panic!("{what}: one side lacks weights"),
    }
}

struct Shape {
    what: &'static str,
    b: usize,
    l: usize,
    /// Some((S, Ekv)) for cross-attention.
    cross: Option<(usize, usize)>,
    e: usize,
    h: usize,
    n: usize,
    causal: bool,
    /// Padded keys as (batch, key); a batch listed for every key is fully padded.
    pad: &'static [(usize, usize)],
    weights: HeadWeights,
}

fn run_shape(seed: u64, c: &Shape) {
    let (s, ekv) = c.cross.unwrap_or((c.l, c.e));
    let w = weights(seed, (c.e, ekv), (c.h, c.n), true);
    let x = array3(seed + 1, (c.b, c.l, c.e));
    let kv = c.cross.map(|_| array3(seed + 2, (c.b, s, ekv)));
    let pad = (!c.pad.is_empty()).then(|| {
        let mut m = Array2::from_elem((c.b, s), false);
        for &(b, j) in c.pad {
            m[[b, j]] = true;
        }
        m
    });
    let opts = MhaOptions {
        causal: c.causal,
        key_padding_mask: pad.as_ref().map(|m| m.view()),
        weights: c.weights,
    };
    let cpu = mha_cpu(&w, x.view(), kv.as_ref().map(|a| a.view()), &opts).unwrap();
    let gpu = gpu_nan_prefilled(&w, &x, kv.as_ref(), &opts);
    compare(c.what, &gpu, &cpu);
    // The blocking host-array form gives the same answer.
    let gw = MhaGpuWeights::upload(ctx(), &w).unwrap();
    let host = mha(ctx(), &gw, x.view(), kv.as_ref().map(|a| a.view()), &opts).unwrap();
    compare(&format!("{} (host arrays)", c.what), &host, &cpu);
}

const ALL_KEYS_OF_BATCH_1: &[(usize, usize)] = &[
    (1, 0),
    (1, 1),
    (1, 2),
    (1, 3),
    (1, 4),
    (1, 5),
    (1, 6),
    (1, 7),
    (1, 8),
    (1, 9),
    (1, 10),
    (1, 11),
    (1, 12),
    (1, 13),
    (1, 14),
    (1, 15),
    (1, 16),
    (0, 3),
];

#[test]
fn gpu_matches_f64_reference() {
    let shapes = [
        Shape {
            what: "self, E 6 (not a multiple of 4), per-head",
            b: 2,
            l: 5,
            cross: None,
            e: 6,
            h: 2,
            n: 2,
            causal: false,
            pad: &[],
            weights: HeadWeights::PerHead,
        },
        Shape {
            what: "cross, Ekv 7, fully padded batch, averaged",
            b: 2,
            l: 3,
            cross: Some((17, 7)),
            e: 10,
            h: 5,
            n: 5,
            causal: false,
            pad: ALL_KEYS_OF_BATCH_1,
            weights: HeadWeights::Averaged,
        },
        Shape {
            what: "GQA 6/2 causal, padded, per-head",
            b: 1,
            l: 33,
            cross: None,
            e: 24,
            h: 6,
            n: 2,
            causal: true,
            pad: &[(0, 0), (0, 20)],
            weights: HeadWeights::PerHead,
        },
        Shape {
            what: "MQA causal cross (top-left), no weights",
            b: 2,
            l: 17,
            cross: Some((15, 33)),
            e: 36,
            h: 4,
            n: 1,
            causal: true,
            pad: &[],
            weights: HeadWeights::None,
        },
        Shape {
            what: "E 1, one head",
            b: 1,
            l: 16,
            cross: None,
            e: 1,
            h: 1,
            n: 1,
            causal: false,
            pad: &[],
            weights: HeadWeights::Averaged,
        },
        Shape {
            what: "E 65 across tiles",
            b: 1,
            l: 9,
            cross: None,
            e: 65,
            h: 5,
            n: 5,
            causal: true,
            pad: &[],
            weights: HeadWeights::None,
        },
    ];
    for (n, c) in shapes.iter().enumerate() {
        run_shape(7000 + 10 * n as u64, c);
    }
}

#[test]
fn fully_padded_rows_are_zero_attention_not_nan() {
    let w = weights(71, (8, 8), (2, 2), true);
    let x = array3(72, (1, 3, 8));
    let pad = Array2::from_elem((1, 3), true);
    let opts = MhaOptions {
        key_padding_mask: Some(pad.view()),
        weights: HeadWeights::PerHead,
        ..Default::default()
    };
    let gpu = gpu_nan_prefilled(&w, &x, None, &opts);
    assert!(gpu.weights.unwrap().iter().all(|&v| v == 0.0));
    // No key contributes: y is the output bias on every row.
    let cpu = mha_cpu(&w, x.view(), None, &opts).unwrap();
    let bias = mha_cpu(&w, Array3::zeros((1, 3, 8)).view(), None, &opts)
        .unwrap()
        .y;
    assert_close("fully padded y", gpu.y.view(), bias.view(), ATOL, RTOL);
    assert_close("fully padded y (cpu)", cpu.y.view(), bias.view(), 0.0, 0.0);
}

/// `true` in a key padding mask removes that key (PyTorch's polarity), on both backends.
#[test]
fn key_padding_polarity_is_pytorchs() {
    let w = weights(81, (8, 8), (2, 2), true);
    let x = array3(82, (2, 4, 8));
    let mut pad = Array2::from_elem((2, 4), false);
    pad[[0, 1]] = true;
    pad[[1, 3]] = true;
    let opts = MhaOptions {
        key_padding_mask: Some(pad.view()),
        weights: HeadWeights::PerHead,
        ..Default::default()
    };
    let cpu = mha_cpu(&w, x.view(), None, &opts).unwrap();
    let gpu = gpu_nan_prefilled(&w, &x, None, &opts);
    for (name, out) in [("cpu", &cpu), ("gpu", &gpu)] {
        let wts = out.weights.as_ref().unwrap();
        for ((b, _, _, j), &v) in wts
            .view()
            .into_dimensionality::<ndarray::Ix4>()
            .unwrap()
            .indexed_iter()
        {
            if pad[[b, j]] {
                assert_eq!(v, 0.0, "{name}: padded key {j} of batch {b} got weight {v}");
            } else {
                assert!(v > 0.0, "{name}: kept key {j} of batch {b} got weight {v}");
            }
        }
    }
}

#[test]
fn incremental_equals_full_causal_run() {
    let w = weights(91, (12, 12), (4, 2), true);
    let x = array3(92, (2, 7, 12));
    // Batch 1's first key is padding: its first step has no key at all.
    let mut pad = Array2::from_elem((2, 7), false);
    pad[[1, 0]] = true;
    pad[[0, 4]] = true;
    for mode in [HeadWeights::PerHead, HeadWeights::Averaged] {
        let opts = MhaOptions {
            causal: true,
            key_padding_mask: Some(pad.view()),
            weights: mode,
        };
        let gw = MhaGpuWeights::upload(ctx(), &w).unwrap();
        let steps = mha_incremental(ctx(), &gw, x.view(), &opts).unwrap();
        let full = gpu_nan_prefilled(&w, &x, None, &opts);
        let cpu = mha_cpu(&w, x.view(), None, &opts).unwrap();
        compare("incremental vs full GPU", &steps, &full);
        compare("incremental vs CPU", &steps, &cpu);
    }
}

#[test]
fn step_writes_nan_prefilled_outputs_and_refuses_past_capacity() {
    let w = weights(101, (8, 8), (2, 1), false);
    let gw = MhaGpuWeights::upload(ctx(), &w).unwrap();
    let x = array3(102, (1, 3, 8));
    let mut cache = KvCache::new(ctx(), &gw, 1, 2).unwrap();
    let opts = MhaOptions {
        weights: HeadWeights::PerHead,
        ..Default::default()
    };
    let causal = MhaOptions {
        causal: true,
        weights: HeadWeights::PerHead,
        ..Default::default()
    };
    let full = mha_cpu(&w, x.slice(ndarray::s![.., ..2, ..]).view(), None, &causal).unwrap();
    for t in 0..3 {
        let xt = GpuTensor::from_array(ctx(), x.slice(ndarray::s![.., t..t + 1, ..]).into_dyn())
            .unwrap();
        let outputs = MhaGpuOutputs {
            y: nan(&[1, 1, 8]),
            weights: Some(nan(&[1, 2, 1, 2])),
        };
        let r = pollster::block_on(mha_step_into_async(
            ctx(),
            &gw,
            &mut cache,
            &xt,
            &opts,
            &outputs,
        ));
        if t == 2 {
            let e = r.unwrap_err();
            assert!(
                matches!(
                    e,
                    AttentionError::InvalidOption {
                        arg: "kv_cache",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("capacity of 2"), "{e}");
            assert_eq!(cache.len(), 2);
            break;
        }
        r.unwrap();
        let y = outputs.y.read(ctx()).unwrap();
        let want = full.y.slice(ndarray::s![.., t..t + 1, ..]).into_dyn();
        assert_close(&format!("step {t}: y"), y.view(), want, ATOL, RTOL);
        let wts = outputs.weights.unwrap().read(ctx()).unwrap();
        let want = full
            .weights
            .as_ref()
            .unwrap()
            .slice(ndarray::s![.., .., t..t + 1, ..])
            .into_dyn()
            .to_owned();
        assert_close(
            &format!("step {t}: weights"),
            wts.view(),
            want.view(),
            ATOL,
            RTOL,
        );
    }
    cache.clear();
    assert!(cache.is_empty());
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mha")
}

fn load<T: ndarray_npy::ReadableElement, D: ndarray::Dimension>(
    case: &str,
    file: &str,
) -> ndarray::Array<T, D> {
    let path = fixture_dir().join(case).join(file);
    read_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn jax_fixtures_on_both_backends() {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("cases.json")).unwrap())
            .unwrap();
    let list = manifest.as_array().unwrap();
    assert_eq!(list.len(), 4, "fixture manifest lost cases");
    for meta in list {
        let name = meta["name"].as_str().unwrap();
        let bytes = std::fs::read(fixture_dir().join(name).join("weights.safetensors")).unwrap();
        let heads = meta["heads"].as_u64().unwrap() as usize;
        let kv_heads = meta["kv_heads"].as_u64().unwrap() as usize;
        let w = MhaWeights::from_safetensors(&bytes, heads, Some(kv_heads))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let x: Array3<f32> = load(name, "x.npy");
        let kv: Option<Array3<f32>> = meta["cross"]
            .as_bool()
            .unwrap()
            .then(|| load(name, "kv.npy"));
        let pad: Option<Array2<bool>> = meta["padded"]
            .as_bool()
            .unwrap()
            .then(|| load(name, "mask.npy"));
        let y: Array3<f32> = load(name, "y.npy");
        for (mode, file) in [
            (HeadWeights::Averaged, "attn_avg.npy"),
            (HeadWeights::PerHead, "attn_heads.npy"),
        ] {
            let opts = MhaOptions {
                causal: meta["causal"].as_bool().unwrap(),
                key_padding_mask: pad.as_ref().map(|m| m.view()),
                weights: mode,
            };
            let want = MhaOutput {
                y: y.clone(),
                weights: Some(load(name, file)),
            };
            let cpu = mha_cpu(&w, x.view(), kv.as_ref().map(|a| a.view()), &opts).unwrap();
            compare(&format!("{name} {mode:?}: cpu"), &cpu, &want);
            let gpu = gpu_nan_prefilled(&w, &x, kv.as_ref(), &opts);
            compare(&format!("{name} {mode:?}: gpu"), &gpu, &want);
        }
    }
}

/// A `.safetensors` file of f32 tensors, written by hand (8-byte header length, JSON
/// header, data).
fn safetensors(tensors: &[(&str, ArrayD<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, a) in tensors {
        let start = data.len();
        data.extend(a.iter().flat_map(|x| x.to_le_bytes()));
        header.insert(name.to_string(), serde_json::json!({"dtype": "F32", "shape": a.shape(), "data_offsets": [start, data.len()]}));
    }
    let mut text = serde_json::to_vec(&Value::Object(header)).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(data);
    out
}

fn zeros(shape: &[usize]) -> ArrayD<f32> {
    ArrayD::zeros(IxDyn(shape))
}

fn rejects(r: Result<MhaWeights, AttentionError>, arg: &str, needle: &str) {
    let e = r.unwrap_err();
    assert!(e.is_input_error(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{arg}:")),
        "{msg:?} should name {arg}"
    );
    assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
}

#[test]
fn weights_files_are_validated_by_name() {
    let good = [
        ("in_proj_weight", zeros(&[18, 6])),
        ("in_proj_bias", zeros(&[18])),
        ("out_proj.weight", zeros(&[6, 6])),
        ("out_proj.bias", zeros(&[6])),
    ];
    let load =
        |t: &[(&str, ArrayD<f32>)], h, n| MhaWeights::from_safetensors(&safetensors(t), h, n);
    let w = load(&good, 3, None).unwrap();
    assert_eq!(
        (w.dims().embed, w.dims().head_dim, w.dims().kv_heads),
        (6, 2, 3)
    );
    rejects(load(&good, 4, None), "heads", "E = 6");
    rejects(load(&good, 3, Some(2)), "kv_heads", "2 key/value heads");
    rejects(load(&good[..3], 3, Some(1)), "in_proj_weight", "[10, 6]");
    rejects(load(&good[1..], 3, None), "in_proj_weight", "missing");
    rejects(load(&good[..2], 3, None), "out_proj.weight", "missing");
    let mut bad = good.to_vec();
    bad[1].1 = zeros(&[17]);
    rejects(load(&bad, 3, None), "in_proj_bias", "[18]");
    bad[1].1 = zeros(&[18]);
    bad[3].1 = zeros(&[5]);
    rejects(load(&bad, 3, None), "out_proj.bias", "[6]");
    // Separate projections with kdim 4 != E.
    let sep = [
        ("q_proj_weight", zeros(&[6, 6])),
        ("k_proj_weight", zeros(&[6, 4])),
        ("v_proj_weight", zeros(&[6, 5])),
        ("out_proj.weight", zeros(&[6, 6])),
    ];
    rejects(load(&sep, 3, None), "v_proj_weight", "[6, 4]");
    rejects(load(&sep[1..], 3, None), "q_proj_weight", "missing");
    let mut sep = sep.to_vec();
    sep[2].1 = zeros(&[6, 4]);
    let w = load(&sep, 3, None).unwrap();
    assert_eq!(w.dims().kv_embed, 4);
    rejects(
        MhaWeights::from_safetensors(b"not a file", 1, None),
        "weights",
        "safetensors",
    );
}

#[test]
fn inputs_are_validated_by_name_on_both_backends() {
    let w = weights(111, (8, 5), (2, 2), true);
    let gw = MhaGpuWeights::upload(ctx(), &w).unwrap();
    let x = array3(112, (2, 3, 8));
    let kv = array3(113, (2, 4, 5));
    let check = |x: &Array3<f32>, kv: Option<&Array3<f32>>, opts: &MhaOptions<'_>, arg: &str| {
        let cpu = mha_cpu(&w, x.view(), kv.map(|a| a.view()), opts).unwrap_err();
        let gpu = mha(ctx(), &gw, x.view(), kv.map(|a| a.view()), opts).unwrap_err();
        assert_eq!(cpu, gpu);
        assert!(
            cpu.to_string().starts_with(&format!("{arg}:")),
            "{cpu} should name {arg}"
        );
    };
    let none = MhaOptions::default();
    check(&x, None, &none, "kv");
    check(&array3(1, (2, 3, 7)), Some(&kv), &none, "x");
    check(&x, Some(&array3(1, (1, 4, 5))), &none, "kv");
    let pad = Array2::from_elem((2, 3), false);
    let opts = MhaOptions {
        key_padding_mask: Some(pad.view()),
        ..Default::default()
    };
    check(&x, Some(&kv), &opts, "key_padding_mask");
}

#[test]
fn tensors_beyond_one_binding_are_too_large() {
    let ctx = GpuContext::new().unwrap().with_max_binding(512);
    let w = weights(121, (8, 8), (2, 2), true);
    let gw = MhaGpuWeights::upload(&ctx, &w).unwrap();
    let x = array3(122, (1, 20, 8));
    let e = mha(&ctx, &gw, x.view(), None, &MhaOptions::default()).unwrap_err();
    assert!(
        matches!(e, AttentionError::TooLarge { arg: "x", .. }),
        "{e}"
    );
}

/// Weights that memory cannot hold are a typed error naming `attn_weights` on the CPU
/// reference, which otherwise holds one row of logits at a time.
#[test]
fn cpu_attention_weights_beyond_memory_are_too_large() {
    let w = weights(131, (2, 2), (1, 1), false);
    let x = array3(132, (1, 1 << 20, 2));
    let opts = MhaOptions {
        weights: HeadWeights::Averaged,
        ..Default::default()
    };
    let e = mha_cpu(&w, x.view(), None, &opts).unwrap_err();
    assert!(
        matches!(
            e,
            AttentionError::TooLarge {
                arg: "attn_weights",
                ..
            }
        ),
        "{e}"
    );
}

/// The attention weights of the layer are blamed as `attn_weights`, not as the layer's
/// weights file.
#[test]
fn gpu_attention_weights_beyond_the_device_name_attn_weights() {
    let ctx = GpuContext::new().unwrap();
    let w = weights(133, (2, 2), (1, 1), true);
    let gw = MhaGpuWeights::upload(&ctx, &w).unwrap();
    // (1, 1, L, L) f32 weights of 6.4 GB: beyond max_buffer_size on every adapter.
    let x = array3(134, (1, 40_000, 2));
    let opts = MhaOptions {
        weights: HeadWeights::PerHead,
        ..Default::default()
    };
    let e = mha(&ctx, &gw, x.view(), None, &opts).unwrap_err();
    assert!(
        matches!(
            e,
            AttentionError::TooLarge {
                arg: "attn_weights",
                ..
            }
        ),
        "{e}"
    );
}
