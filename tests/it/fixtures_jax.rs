//! Both backends against fixtures computed independently by JAX in float64
//! (`tests/fixtures/generate.py`; manifest `tests/fixtures/cases.json`).

use std::path::{Path, PathBuf};

use crate::common::*;
use ndarray::{Array1, Array4, ArrayD};
use ndarray_npy::read_npy;
use serde_json::Value;
use wgpu_attention::{
    attention_cpu, attention_reference, Alignment, AttentionOptions, AttentionOutput, KernelPath,
    Mask, Window,
};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn load<T: ndarray_npy::ReadableElement, D: ndarray::Dimension>(
    case: &str,
    file: &str,
) -> ndarray::Array<T, D> {
    let path = dir().join(case).join(file);
    read_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Case {
    name: String,
    meta: Value,
    q: Array4<f32>,
    k: Array4<f32>,
    v: Array4<f32>,
    bool_mask: Option<ArrayD<bool>>,
    bias: Option<ArrayD<f32>>,
    kv_lens: Option<Vec<u32>>,
    expected: AttentionOutput,
}

fn cases() -> Vec<Case> {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("cases.json")).unwrap()).unwrap();
    let list = manifest.as_array().expect("cases.json is a list");
    assert!(list.len() >= 15, "fixture manifest lost cases");
    list.iter()
        .map(|meta| {
            let name = meta["dir"].as_str().unwrap().to_string();
            let n = name.as_str();
            let lens: Option<Array1<i32>> = meta["kv_lens"]
                .as_bool()
                .unwrap()
                .then(|| load(n, "kv_lens.npy"));
            Case {
                q: load(n, "q.npy"),
                k: load(n, "k.npy"),
                v: load(n, "v.npy"),
                bool_mask: (meta["mask"] == "bool").then(|| load(n, "mask.npy")),
                bias: (meta["mask"] == "additive").then(|| load(n, "mask.npy")),
                kv_lens: lens.map(|l| l.iter().map(|&x| x as u32).collect()),
                expected: AttentionOutput {
                    out: load(n, "out.npy"),
                    weights: Some(load(n, "weights.npy")),
                    lse: Some(load::<f32, ndarray::Ix3>(n, "lse.npy")),
                },
                meta: meta.clone(),
                name,
            }
        })
        .collect()
}

fn options<'a>(c: &'a Case, path: KernelPath, weights: bool) -> AttentionOptions<'a> {
    let m = &c.meta;
    AttentionOptions {
        scale: m["scale"].as_f64().map(|s| s as f32),
        causal: m["causal"].as_bool().unwrap(),
        alignment: match m["alignment"].as_str().unwrap() {
            "bottom-right" => Alignment::BottomRight,
            _ => Alignment::TopLeft,
        },
        window: m["window"]
            .as_array()
            .map(|w| Window::new(w[0].as_u64().unwrap() as u32, w[1].as_u64().unwrap() as u32)),
        mask: c
            .bool_mask
            .as_ref()
            .map(|b| Mask::Bool(b.view()))
            .or(c.bias.as_ref().map(|b| Mask::Additive(b.view()))),
        kv_lens: c.kv_lens.as_deref(),
        return_weights: weights,
        return_lse: true,
        path,
        ..Default::default()
    }
}

fn compare(what: &str, got: &AttentionOutput, want: &AttentionOutput) {
    assert_close(
        &format!("{what}: out"),
        got.out.view(),
        want.out.view(),
        ATOL,
        RTOL,
    );
    if let Some(w) = &got.weights {
        let e = want.weights.as_ref().unwrap();
        assert_close(&format!("{what}: weights"), w.view(), e.view(), ATOL, RTOL);
    }
    let (l, e) = (got.lse.as_ref().unwrap(), want.lse.as_ref().unwrap());
    assert_close(&format!("{what}: lse"), l.view(), e.view(), ATOL, RTOL);
}

#[test]
fn cpu_reference_matches_jax() {
    for c in cases() {
        let got = attention_reference(
            c.q.view(),
            c.k.view(),
            c.v.view(),
            &options(&c, KernelPath::Auto, true),
        )
        .unwrap();
        compare(&format!("cpu {}", c.name), &got, &c.expected);
    }
}

#[test]
fn fast_cpu_matches_jax() {
    for c in cases() {
        for weights in [true, false] {
            let opts = options(&c, KernelPath::Auto, weights);
            let got = attention_cpu(c.q.view(), c.k.view(), c.v.view(), &opts).unwrap();
            compare(
                &format!("fast cpu {} (weights {weights})", c.name),
                &got,
                &c.expected,
            );
        }
    }
}

#[test]
fn gpu_staged_matches_jax() {
    for c in cases() {
        let got =
            gpu_nan_prefilled(&c.q, &c.k, &c.v, &options(&c, KernelPath::Staged, true)).unwrap();
        compare(&format!("gpu staged {}", c.name), &got, &c.expected);
    }
}

#[test]
fn gpu_default_path_matches_jax() {
    for c in cases() {
        let got =
            gpu_nan_prefilled(&c.q, &c.k, &c.v, &options(&c, KernelPath::Auto, false)).unwrap();
        compare(&format!("gpu auto {}", c.name), &got, &c.expected);
    }
}

#[test]
fn gpu_fused_and_decode_paths_match_jax() {
    for c in cases() {
        for path in [KernelPath::Fused, KernelPath::Decode] {
            let got = gpu_nan_prefilled(&c.q, &c.k, &c.v, &options(&c, path, false)).unwrap();
            compare(&format!("gpu {path:?} {}", c.name), &got, &c.expected);
        }
    }
}
