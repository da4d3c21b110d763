//! SmolLM2-135M-Instruct from the fetched GGUF file against the numpy float64 reference.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use ndarray::{s, Array4, Ix4};
use wgpu_attention::model::llama::{gguf, LlamaGpu, LlamaModel};
use wgpu_attention::model::{resolve_model_path, ForwardOutput, GenerateOptions};

use crate::common::ctx;

const NEEDS: &str = "needs the fetched models: scripts/fetch-models.sh";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/llama")
}

fn json(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn model_path() -> PathBuf {
    resolve_model_path("smollm2").expect("run scripts/fetch-models.sh first")
}

fn model() -> &'static LlamaModel {
    static M: OnceLock<LlamaModel> = OnceLock::new();
    M.get_or_init(|| LlamaModel::load(&model_path()).expect("load SmolLM2"))
}

fn gpu() -> &'static LlamaGpu {
    static G: OnceLock<LlamaGpu> = OnceLock::new();
    G.get_or_init(|| model().upload(ctx()).expect("upload SmolLM2"))
}

fn ids_of(text: &str) -> Vec<u32> {
    model()
        .tokenize(text)
        .expect("tokenize")
        .iter()
        .map(|t| t.id)
        .collect()
}

/// The largest `|got - want|`, and the largest `|got - want| / (atol + rtol |want|)` (at
/// most 1 within the bound) with where it is.
fn errors(got: &Array4<f32>, want: &Array4<f32>, atol: f32, rtol: f32) -> (f32, f32, [usize; 4]) {
    assert_eq!(got.shape(), want.shape());
    let mut worst = (0.0f32, 0.0f32, [0; 4]);
    for ((i, &g), &w) in got.indexed_iter().zip(want.iter()) {
        let e = (g - w).abs();
        let ratio = if g.is_finite() {
            e / (atol + rtol * w.abs())
        } else {
            f32::INFINITY
        };
        worst.0 = worst.0.max(e);
        if ratio > worst.1 {
            (worst.1, worst.2) = (ratio, [i.0, i.1, i.2, i.3]);
        }
    }
    worst
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn token_ids_match_the_python_tokenizers() {
    let want = json("ids.json");
    let want = want.as_object().expect("object");
    assert!(
        want.len() >= 12,
        "{NEEDS}: fixture has {} sentences",
        want.len()
    );
    for (text, ids) in want {
        let ids: Vec<u32> = ids
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(ids_of(text), ids, "ids of {text:?}");
        assert_eq!(
            &model().decode(&ids).expect("decode"),
            text,
            "decode of {text:?}"
        );
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn dequantized_values_match_the_gguf_package() {
    let bytes = std::fs::read(model_path()).expect("read");
    let g = gguf::parse(&bytes).expect("parse");
    let want = json("dequant.json");
    let want: BTreeMap<String, serde_json::Value> =
        serde_json::from_value(want).expect("dequant fixture");
    assert!(want.len() >= 3);
    for (name, w) in &want {
        let t = g.tensor(name).expect("tensor");
        assert_eq!(t.ty.name(), w["type"].as_str().expect("type"), "{name}");
        let x = g.dequantize(t).expect("dequantize");
        let floats = |k: &str| -> Vec<f32> {
            w[k].as_array()
                .expect(k)
                .iter()
                .map(|v| v.as_f64().expect("float") as f32)
                .collect()
        };
        assert_eq!(x[..64], floats("first")[..], "{name}: first values");
        assert_eq!(x[x.len() - 32..], floats("last")[..], "{name}: last values");
        let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let abs: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
        let (ws, wa) = (
            w["sum"].as_f64().expect("sum"),
            w["abs_sum"].as_f64().expect("abs"),
        );
        assert!(
            (sum - ws).abs() <= 1e-9 * wa.max(1.0),
            "{name}: sum {sum} vs {ws}"
        );
        assert!(
            (abs - wa).abs() <= 1e-9 * wa.max(1.0),
            "{name}: |sum| {abs} vs {wa}"
        );
    }
}

fn check_attention(what: &str, out: &ForwardOutput) {
    let want: Array4<f32> = ndarray_npy::read_npy::<_, ndarray::ArrayD<f32>>(
        fixtures().join("attention_i_love_ai.npy"),
    )
    .expect("npy")
    .into_dimensionality::<Ix4>()
    .expect("rank 4");
    let got = out.attention.as_ref().expect("attention");
    let l = want.shape()[2];
    assert_eq!(got.shape(), &[30, 9, l, l], "{what}: shape");
    for i in 0..l {
        for j in i + 1..l {
            let above = got.slice(s![.., .., i, j]);
            assert!(
                above.iter().all(|&v| v == 0.0),
                "{what}: ({i}, {j}) above the diagonal"
            );
        }
    }
    let (max_err, ratio, at) = errors(got, &want, 2e-4, 1e-3);
    eprintln!(
        "{what}: attention (30, 9, {l}, {l}): max |err| {max_err:.3e}; worst err / (2e-4 + 1e-3|ref|) = {ratio:.3e} at {at:?}"
    );
    assert!(
        ratio <= 1.0,
        "{what}: attention at {at:?} beyond the bound ({ratio} of it)"
    );
}

fn check_next(what: &str, out: &ForwardOutput) {
    let want = json("next_capital.json");
    let logits = out.logits.as_ref().expect("logits");
    let top: Vec<usize> = want["top_ids"]
        .as_array()
        .expect("top")
        .iter()
        .map(|v| v.as_u64().expect("id") as usize)
        .collect();
    let vals: Vec<f32> = want["top_logits"]
        .as_array()
        .expect("vals")
        .iter()
        .map(|v| v.as_f64().expect("logit") as f32)
        .collect();
    let max = want["max_abs_logit"].as_f64().expect("max") as f32;
    let bound = 1e-2 * max;
    let worst = top
        .iter()
        .zip(&vals)
        .map(|(&i, &v)| (logits[i] - v).abs())
        .fold(0.0f32, f32::max);
    eprintln!(
        "{what}: top-50 logits worst |err| {worst:.3e} (bound {bound:.3e}, max|logit| {max})"
    );
    assert!(worst <= bound, "{what}: logits off by {worst} > {bound}");
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    assert_eq!(
        model().decode(&[order[0] as u32]).expect("decode"),
        " Paris"
    );
    let names = |ids: &[usize]| -> Vec<String> {
        ids.iter()
            .map(|&i| model().decode(&[i as u32]).expect("decode"))
            .collect()
    };
    eprintln!(
        "{what}: top 5 {:?}, reference {:?}",
        names(&order[..5]),
        names(&top[..5])
    );
    for (k, (&got, &want)) in order.iter().zip(&top).take(5).enumerate() {
        if got != want {
            // Swaps are allowed only between tokens the reference puts closer than the bound.
            let r = top.iter().position(|&t| t == got).expect("in top 50");
            assert!(
                (vals[r] - vals[k]).abs() < bound,
                "{what}: top {k} is {got} not {want}"
            );
        }
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn cpu_attention_of_i_love_ai_matches_the_reference() {
    let ids = ids_of("I love AI !");
    let out = model().forward_cpu(&ids, true).expect("forward");
    check_attention("fast cpu", &out);
    let out = model().forward_reference(&ids, true).expect("forward");
    check_attention("float64 cpu", &out);
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn gpu_attention_of_i_love_ai_matches_the_reference() {
    let out =
        pollster::block_on(gpu().forward(ctx(), &ids_of("I love AI !"), true)).expect("forward");
    check_attention("gpu", &out);
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn cpu_next_token_after_the_capital_of_france_is_paris() {
    let ids = ids_of("The capital of France is");
    let out = model().forward_cpu(&ids, false).expect("forward");
    check_next("fast cpu", &out);
    let out = model().forward_reference(&ids, false).expect("forward");
    check_next("float64 cpu", &out);
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn gpu_next_token_after_the_capital_of_france_is_paris() {
    let out = pollster::block_on(gpu().forward(ctx(), &ids_of("The capital of France is"), false))
        .expect("forward");
    check_next("gpu", &out);
}

fn greedy8() -> Vec<u32> {
    json("next_capital.json")["greedy8"]
        .as_array()
        .expect("greedy8")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

fn opts(n: usize, use_cache: bool) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        use_cache,
        stop_at_eos: false,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn cpu_greedy_generation_matches_the_reference() {
    let prompt = ids_of("The capital of France is");
    let cached = model()
        .generate_cpu(&prompt, &opts(8, true), &mut |_| {})
        .expect("generate");
    assert_eq!(cached.generated, greedy8());
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn gpu_greedy_generation_matches_the_reference_with_and_without_the_cache() {
    let prompt = ids_of("The capital of France is");
    let mut streamed = Vec::new();
    let cached = pollster::block_on(
        gpu().generate(ctx(), &prompt, &opts(8, true), &mut |t| streamed.push(t)),
    )
    .expect("generate");
    assert_eq!(cached.generated, greedy8());
    assert_eq!(streamed, greedy8());
    let full = pollster::block_on(gpu().generate(ctx(), &prompt, &opts(8, false), &mut |_| {}))
        .expect("generate");
    assert_eq!(full.generated, greedy8());
}

fn greedy32() -> Vec<u32> {
    json("next_capital.json")["greedy32"]
        .as_array()
        .expect("greedy32 (regenerate with generate.py)")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn gpu_greedy_generation_of_32_tokens_with_the_cache_matches_the_reference() {
    let prompt = ids_of("The capital of France is");
    let got = pollster::block_on(gpu().generate(ctx(), &prompt, &opts(32, true), &mut |_| {}))
        .expect("generate");
    let want = greedy32();
    assert_eq!(want.len(), 32);
    let first = got.generated.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        first.is_none() && got.generated.len() == 32,
        "first difference at token {first:?}: {:?} vs the reference {want:?} ({:?} vs {:?})",
        got.generated,
        model().decode(&got.generated).unwrap_or_default(),
        model().decode(&want).unwrap_or_default()
    );
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn the_weights_stay_quantized_on_the_device() {
    let bytes = std::fs::read(model_path()).expect("read");
    let g = gguf::parse(&bytes).expect("parse");
    let file: u64 = g
        .tensors
        .iter()
        .map(|t| gguf::tensor_bytes(t).expect("size"))
        .sum();
    let device = gpu().weight_bytes();
    eprintln!(
        "weights on the device: {device} bytes for {file} bytes of tensors in the file ({:.3}x)",
        device as f64 / file as f64
    );
    assert!(
        device as f64 <= 1.25 * file as f64,
        "{device} device bytes exceed 1.25 x the file's {file} tensor bytes"
    );
}

/// SmolLM2's attention rollout of "I love AI !" (causal): lower-triangular with its upper
/// cells exactly 0, rows summing to 1, the first token drawing only on itself, and the
/// GPU's within 1e-5 of the fast CPU path's and of the rollout of the numpy float64
/// reference's attention.
#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn rollout_of_i_love_ai_is_lower_triangular_on_both_backends() {
    use wgpu_attention::viz::{attention_rollout, RolloutOptions};
    let rollout = |a: &Array4<f32>| -> ndarray::Array2<f32> {
        attention_rollout(a.view().into_dyn(), &RolloutOptions::default())
            .expect("rollout")
            .into_dimensionality()
            .expect("(L, L)")
    };
    let ids = ids_of("I love AI !");
    let cpu = model().forward_cpu(&ids, true).expect("forward");
    let gpu = pollster::block_on(gpu().forward(ctx(), &ids, true)).expect("forward");
    let numpy: Array4<f32> =
        ndarray_npy::read_npy(fixtures().join("attention_i_love_ai.npy")).expect("fixture");
    let want = rollout(&numpy);
    for (how, out) in [("fast cpu", cpu), ("gpu", gpu)] {
        let r = rollout(&out.attention.expect("attention"));
        assert_eq!(r.dim(), (ids.len(), ids.len()), "{how}");
        for ((i, j), &w) in r.indexed_iter() {
            if j > i {
                assert_eq!(w, 0.0, "{how}: ({i}, {j})");
            }
        }
        assert!((r[[0, 0]] - 1.0).abs() < 1e-6, "{how}: {}", r[[0, 0]]);
        for row in r.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-5, "{how}: {row}");
        }
        let d = r
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0f32, f32::max);
        assert!(d <= 1e-5, "{how}: {d:e} from the reference's rollout");
        println!("{how}: max |rollout - rollout of the reference| = {d:e}");
    }
}
