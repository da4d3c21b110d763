//! all-MiniLM-L6-v2 itself, against the committed fixtures of an independent float64
//! numpy forward pass and of the Python `tokenizers` package
//! (tests/fixtures/models/bert/generate.py). Needs the model files: run
//! scripts/fetch-models.sh, then `cargo test --release --test it -- --ignored model_bert_real`.
//!
//! Bounds, per element against the float64 reference: attention probabilities within
//! 2e-4 + 1e-3·|ref| (the bound) with rows summing to 1 within 1e-5; the last
//! hidden state within 1e-4 + 1e-4·|ref| (its elements reach about 5.6); the sentence
//! embedding within 1e-6 (its elements are about 0.05); the attention rollout and the
//! per-head statistics within 1e-5.

use std::path::PathBuf;

use crate::cli_common::{cli, TempDir};
use crate::common::ctx;
use ndarray::{Array1, Array2, Array4};
use ndarray_npy::read_npy;
use serde_json::Value;
use wgpu_attention::model::bert::{sentence_embedding, BertModel};
use wgpu_attention::model::{resolve_model_path, ForwardOutput};

const NEEDS: &str = "needs the fetched models: scripts/fetch-models.sh";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/bert")
}

fn json(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("fixture json");
    serde_json::from_str(&text).expect("fixture json parses")
}

fn minilm() -> BertModel {
    let path = resolve_model_path("minilm").unwrap_or_else(|e| panic!("{e}"));
    BertModel::load(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn ids_of(v: &Value) -> Vec<u32> {
    v["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_u64().expect("id") as u32)
        .collect()
}

/// Every element within `atol + rtol * |ref|`; returns the worst ratio to the bound.
fn check(what: &str, got: &[f32], want: &[f32], atol: f64, rtol: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst = (0usize, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let r = (f64::from(g) - f64::from(w)).abs() / (atol + rtol * f64::from(w).abs());
        if r.is_nan() || r > worst.1 {
            worst = (i, if r.is_nan() { f64::INFINITY } else { r });
        }
    }
    let (i, r) = worst;
    assert!(
        r <= 1.0,
        "{what}: element {i} is {} against {} ({r:.2} x the bound)",
        got[i],
        want[i]
    );
    r
}

fn check_forward(how: &str, run: impl Fn(&[u32]) -> ForwardOutput) {
    for case in json("forward.json") {
        let name = case["name"].as_str().expect("name");
        let ids = ids_of(&case);
        let out = run(&ids);
        let dir = fixtures();
        let want_a: Array4<f32> = read_npy(dir.join(format!("{name}_attention.npy"))).expect("npy");
        let want_h: Array2<f32> = read_npy(dir.join(format!("{name}_hidden.npy"))).expect("npy");
        let want_e: Array1<f32> = read_npy(dir.join(format!("{name}_embedding.npy"))).expect("npy");
        let a = out.attention.expect("attention");
        assert_eq!(a.dim(), want_a.dim(), "{how} {name}: attention shape");
        let ra = check(
            &format!("{how} {name} attention"),
            a.as_slice().unwrap(),
            want_a.as_slice().unwrap(),
            2e-4,
            1e-3,
        );
        for row in a.rows() {
            assert!(
                (row.sum() - 1.0).abs() < 1e-5,
                "{how} {name}: a row sums to {}",
                row.sum()
            );
        }
        let rh = check(
            &format!("{how} {name} hidden"),
            out.hidden.as_slice().unwrap(),
            want_h.as_slice().unwrap(),
            1e-4,
            1e-4,
        );
        let e = sentence_embedding(out.hidden.view());
        let re = check(
            &format!("{how} {name} embedding"),
            e.as_slice().unwrap(),
            want_e.as_slice().unwrap(),
            1e-6,
            0.0,
        );
        println!("{how} {name}: worst error / bound: attention {ra:.4}, hidden {rh:.4}, embedding {re:.4}");
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn tokenizer_ids_equal_the_python_tokenizers() {
    let _ = NEEDS;
    let m = minilm();
    let cases = json("tokens.json");
    assert!(cases.len() >= 12);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let tokens = m.tokenize(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
        assert_eq!(ids, ids_of(&case), "{text}");
        let strings: Vec<&str> = tokens.iter().map(|t| t.raw.as_str()).collect();
        let want: Vec<&str> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(strings, want, "{text}");
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn cpu_forwards_match_the_numpy_reference() {
    let m = minilm();
    check_forward("fast cpu", |ids| {
        m.forward_cpu(ids, true).expect("cpu forward")
    });
    check_forward("float64 cpu", |ids| {
        m.forward_reference(ids, true).expect("reference forward")
    });
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn gpu_forward_matches_the_numpy_reference() {
    let m = minilm();
    let gpu = m.upload(ctx()).expect("upload");
    check_forward("gpu", |ids| {
        pollster::block_on(gpu.forward(ctx(), ids, true)).expect("gpu forward")
    });
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn info_names_minilm_and_its_files() {
    let info = minilm().info();
    assert_eq!(
        (info.layers, info.heads, info.hidden, info.head_dim),
        (6, 12, 384, 32)
    );
    assert_eq!(
        (info.intermediate, info.vocab, info.max_positions),
        (1536, 30522, 512)
    );
    assert_eq!(info.files.len(), 3);
    assert!(info.files.iter().all(|(_, sha)| sha.len() == 64));
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn cli_attention_on_the_cat_sentence_meets_the_bound() {
    let dir = std::env::temp_dir().join(format!("wgpu-attention-minilm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a_path, t_path) = (dir.join("a.npy"), dir.join("t.json"));
    for backend in ["gpu", "cpu"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
            .args([
                "model",
                "attention",
                "--model",
                "minilm",
                "--text",
                "The cat sat on the mat",
            ])
            .arg("--out")
            .arg(&a_path)
            .arg("--tokens-out")
            .arg(&t_path)
            .args(["--backend", backend])
            .output()
            .expect("run wgpu-attention");
        assert!(
            out.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let a: Array4<f32> = read_npy(&a_path).expect("A.npy");
        assert_eq!(a.dim(), (6, 12, 8, 8));
        for row in a.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-5);
        }
        let want: Array4<f32> = read_npy(fixtures().join("cat_attention.npy")).unwrap();
        let r = check(
            &format!("cli {backend}"),
            a.as_slice().unwrap(),
            want.as_slice().unwrap(),
            2e-4,
            1e-3,
        );
        println!("cli {backend}: worst error / bound {r:.4}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&t_path).unwrap()).unwrap();
        let raw: Vec<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["raw"].as_str().unwrap())
            .collect();
        assert_eq!(
            raw,
            ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Attention rollout of "The cat sat on the mat" against the numpy float64 rollout of the
/// numpy float64 forward pass (cat_rollout.npy, written by generate.py), within 1e-5 per
/// element: from the float64 reference forward, the fast CPU forward, the GPU forward,
/// and `model rollout` on both backends.
#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn rollout_of_the_cat_sentence_matches_the_numpy_rollout() {
    use wgpu_attention::viz::{attention_rollout, RolloutOptions};
    let want: Array2<f64> = read_npy(fixtures().join("cat_rollout.npy")).expect("npy");
    let case = json("forward.json")
        .into_iter()
        .find(|c| c["name"] == "cat")
        .expect("the cat sentence");
    let ids = ids_of(&case);
    let worst = |how: &str, got: &Array2<f32>| {
        assert_eq!(got.dim(), want.dim(), "{how}: shape");
        let d = got
            .iter()
            .zip(&want)
            .map(|(&g, &w)| (f64::from(g) - w).abs())
            .fold(
                0.0f64,
                |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            );
        assert!(d <= 1e-5, "{how}: rollout differs from numpy's by {d:e}");
        println!("{how}: max |rollout - numpy| = {d:e}");
    };
    let rollout = |a: &Array4<f32>| -> Array2<f32> {
        attention_rollout(a.view().into_dyn(), &RolloutOptions::default())
            .expect("rollout")
            .into_dimensionality()
            .expect("(L, L)")
    };
    for (how, attention) in attention_on_every_path(&ids) {
        worst(how, &rollout(&attention));
    }

    let dir = TempDir::new("real-rollout");
    let r_path = dir.arg("r.npy");
    for backend in ["gpu", "cpu"] {
        let out = cli(&cat_cli("rollout", backend, "--out", &r_path));
        assert!(
            out.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Array2<f32> = read_npy(&r_path).expect("R.npy");
        worst(&format!("cli {backend}"), &r);
    }
}

/// Per-head statistics of "The cat sat on the mat" against numpy's float64 computation
/// from cat_attention.npy (cat_head_stats.json, written by head_stats.py): entropy,
/// previous- and first-token attention and the nearest head's distance within 1e-5, the
/// nearest head the same; from the fixture's attention itself, the float64 reference
/// forward, the fast CPU forward, the GPU forward, and `model heads --json` on both
/// backends.
#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn head_stats_of_the_cat_sentence_match_numpys() {
    use wgpu_attention::viz::{head_stats, HeadStats};
    let text = std::fs::read_to_string(fixtures().join("cat_head_stats.json")).expect("fixture");
    let want: Value = serde_json::from_str(&text).expect("fixture json parses");
    let want = want["heads"].as_array().expect("heads").clone();
    assert_eq!(want.len(), 72);
    let case = json("forward.json")
        .into_iter()
        .find(|c| c["name"] == "cat")
        .expect("the cat sentence");
    let ids = ids_of(&case);
    // Compares a list of head objects in `model heads --json`'s layout.
    let worst = |how: &str, got: &[Value]| {
        assert_eq!(got.len(), want.len(), "{how}: heads");
        let mut d = 0.0f64;
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (&g["layer"], &g["head"]),
                (&w["layer"], &w["head"]),
                "{how}"
            );
            assert_eq!(g["nearest"], w["nearest"], "{how}: nearest of {w}");
            for key in ["entropy", "previous_token", "first_token", "distance"] {
                let (x, y) = (g[key].as_f64(), w[key].as_f64().expect("number"));
                let e = x.map_or(f64::INFINITY, |x| (x - y).abs());
                d = if e.is_nan() { f64::INFINITY } else { d.max(e) };
            }
        }
        assert!(
            d <= 1e-5,
            "{how}: head statistics differ from numpy's by {d:e}"
        );
        println!("{how}: max |head statistics - numpy| = {d:e}");
    };
    let as_json = |s: &HeadStats| -> Vec<Value> {
        s.stats
            .iter()
            .map(|h| {
                let n = h.nearest.expect("72 heads");
                serde_json::json!({
                    "layer": h.layer, "head": h.head, "entropy": h.entropy,
                    "previous_token": h.previous_token, "first_token": h.first_token,
                    "nearest": [n.layer, n.head], "distance": n.distance,
                })
            })
            .collect()
    };
    let stats = |a: &Array4<f32>| as_json(&head_stats(a.view().into_dyn()).expect("stats"));
    let fixture: Array4<f32> = read_npy(fixtures().join("cat_attention.npy")).expect("npy");
    worst("fixture attention", &stats(&fixture));
    for (how, attention) in attention_on_every_path(&ids) {
        worst(how, &stats(&attention));
    }

    let dir = TempDir::new("real-heads");
    let j_path = dir.arg("heads.json");
    for backend in ["gpu", "cpu"] {
        let out = cli(&cat_cli("heads", backend, "--json", &j_path));
        assert!(
            out.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 73);
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&j_path).expect("json")).expect("json");
        assert_eq!(doc["tokens"].as_array().map(Vec::len), Some(8));
        worst(
            &format!("cli {backend}"),
            doc["heads"].as_array().expect("heads"),
        );
    }
}

/// MiniLM's attention for `ids` from every path: the float64 reference, the fast CPU
/// forward and the GPU forward.
fn attention_on_every_path(ids: &[u32]) -> Vec<(&'static str, Array4<f32>)> {
    let m = minilm();
    let reference = m.forward_reference(ids, true).expect("reference forward");
    let cpu = m.forward_cpu(ids, true).expect("cpu forward");
    let gpu = m.upload(ctx()).expect("upload");
    let out = pollster::block_on(gpu.forward(ctx(), ids, true)).expect("gpu forward");
    vec![
        ("float64 cpu", reference.attention.expect("attention")),
        ("fast cpu", cpu.attention.expect("attention")),
        ("gpu", out.attention.expect("attention")),
    ]
}

/// `model COMMAND --model minilm` on the cat sentence with `backend`, writing `out_flag`
/// to `path`.
fn cat_cli<'a>(
    command: &'a str,
    backend: &'a str,
    out_flag: &'a str,
    path: &'a str,
) -> Vec<&'a str> {
    vec![
        "model",
        command,
        "--model",
        "minilm",
        "--text",
        "The cat sat on the mat",
        "--backend",
        backend,
        out_flag,
        path,
    ]
}
