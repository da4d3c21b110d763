//! `wgpu-attention model ...` on a tiny random BERT written to a temporary directory:
//! outputs, their shapes, and bad input (exit 2, one line naming the flag, no output).

use std::process::Command;

use crate::bert_tiny::{tiny_bert, HEADS, LAYERS, POSITIONS};
use crate::cli_common::{
    assert_bad_input, assert_bad_input_output, cli, cli_limited, stderr_of, TempDir,
};
use ndarray::{Array2, Array4, Ix2};
use ndarray_npy::read_npy;
use serde_json::Value;
use wgpu_attention::viz::{attention_rollout, head_stats, RolloutOptions};

fn model_dir(t: &TempDir) -> String {
    crate::bert_tiny::write_dir(&t.path("tiny"), &tiny_bert(1));
    t.arg("tiny")
}

fn ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

#[test]
fn info_and_tokenize() {
    let t = TempDir::new("model-info");
    let m = model_dir(&t);
    let info = ok(&["model", "info", "--model", &m]);
    assert!(info.contains("architecture: bert"), "{info}");
    assert!(info.contains(&format!("layers: {LAYERS}")), "{info}");
    assert_eq!(info.matches("sha256").count(), 3, "{info}");
    let tokens = ok(&["model", "tokenize", "--model", &m, "--text", "The cat sat"]);
    let lines: Vec<&str> = tokens.lines().collect();
    assert_eq!(lines.len(), 5, "{tokens}");
    assert!(
        lines[0].ends_with("[CLS]") && lines[4].ends_with("[SEP]"),
        "{tokens}"
    );
    assert!(lines[2].trim_start().starts_with("5 "), "{tokens}");
}

#[test]
fn attention_writes_every_layer_and_head() {
    let t = TempDir::new("model-attention");
    let m = model_dir(&t);
    let mut results = Vec::new();
    for backend in ["gpu", "cpu"] {
        let (a, tok) = (
            t.arg(&format!("a-{backend}.npy")),
            t.arg(&format!("t-{backend}.json")),
        );
        let text = "the cat ate the fish";
        ok(&[
            "model",
            "attention",
            "--model",
            &m,
            "--text",
            text,
            "--out",
            &a,
            "--tokens-out",
            &tok,
            "--backend",
            backend,
        ]);
        let probs: Array4<f32> = read_npy(&a).expect("A.npy");
        assert_eq!(probs.dim(), (LAYERS, HEADS, 7, 7));
        for row in probs.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-5);
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&tok).unwrap()).expect("T.json");
        let raw: Vec<&str> = json
            .as_array()
            .expect("a list")
            .iter()
            .map(|t| t["raw"].as_str().expect("raw"))
            .collect();
        assert_eq!(raw, ["[CLS]", "the", "cat", "ate", "the", "fish", "[SEP]"]);
        results.push(probs);
    }
    for (g, c) in results[0].iter().zip(&results[1]) {
        assert!(
            (g - c).abs() <= 2e-4 + 1e-3 * c.abs(),
            "gpu {g} against cpu {c}"
        );
    }
}

#[test]
fn bad_model_input_exits_2_naming_the_flag() {
    let t = TempDir::new("model-bad");
    let m = model_dir(&t);
    let out = t.arg("a.npy");
    let run = |m: &str, text: &str| {
        vec![
            "model",
            "attention",
            "--model",
            m,
            "--text",
            text,
            "--out",
            &out,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let check = |what: &str, args: Vec<String>, needle: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(what, &args, needle);
        assert!(!t.path("a.npy").exists(), "{what}: an output was written");
    };
    check(
        "missing model",
        run(&t.arg("nowhere"), "the cat"),
        "--model",
    );
    let broken = t.path("broken");
    crate::bert_tiny::write_dir(&broken, &tiny_bert(1));
    std::fs::write(broken.join("config.json"), "{ not json").unwrap();
    check(
        "malformed config",
        run(&t.arg("broken"), "the cat"),
        "config.json",
    );
    std::fs::write(broken.join("config.json"), crate::bert_tiny::config_json()).unwrap();
    std::fs::write(broken.join("model.safetensors"), b"\x02\0\0\0\0\0\0\0{}").unwrap();
    check(
        "missing tensors",
        run(&t.arg("broken"), "the cat"),
        "word_embeddings",
    );
    check("empty text", run(&m, ""), "--text");
    check("blank text", run(&m, "  "), "--text");
    let long = "the ".repeat(POSITIONS);
    check("too long text", run(&m, &long), "--text");
    let mut no_dir = run(&m, "the cat");
    no_dir[7] = t.arg("no/such/dir/a.npy");
    check("output directory missing", no_dir, "--out");
    check(
        "next on an encoder",
        ["model", "next", "--model", &m, "--text", "the cat"]
            .map(String::from)
            .to_vec(),
        "--model",
    );
    check(
        "generate on an encoder",
        [
            "model",
            "generate",
            "--model",
            &m,
            "--text",
            "the cat",
            "--max-new-tokens",
            "3",
        ]
        .map(String::from)
        .to_vec(),
        "--model",
    );
    check(
        "bad temperature",
        [
            "model",
            "generate",
            "--model",
            &m,
            "--text",
            "a",
            "--max-new-tokens",
            "3",
            "--temperature",
            "-1",
        ]
        .map(String::from)
        .to_vec(),
        "--temperature",
    );
    check(
        "stages on the CPU",
        [
            "model",
            "generate",
            "--model",
            &m,
            "--text",
            "a",
            "--max-new-tokens",
            "3",
            "--stages",
            "--backend",
            "cpu",
        ]
        .map(String::from)
        .to_vec(),
        "--stages",
    );
}

/// `model rollout` writes the rollout of the attention `model attention` writes (one
/// (L, L) matrix with rows summing to 1), on both backends, and `heatmap` draws it.
#[test]
fn rollout_is_the_rollout_of_the_attention_and_heatmap_draws_it() {
    let t = TempDir::new("model-rollout");
    let m = model_dir(&t);
    let text = "the cat ate the fish";
    for backend in ["gpu", "cpu"] {
        let (a, r, tok) = (
            t.arg(&format!("a-{backend}.npy")),
            t.arg(&format!("r-{backend}.npy")),
            t.arg(&format!("t-{backend}.json")),
        );
        let common = ["--model", &m, "--text", text, "--backend", backend];
        ok(&[&["model", "attention", "--out", &a][..], &common].concat());
        let summary = ok(&[
            &["model", "rollout", "--out", &r, "--tokens-out", &tok][..],
            &common,
        ]
        .concat());
        assert!(summary.contains("(7, 7) attention rollout"), "{summary}");
        let probs: Array4<f32> = read_npy(&a).expect("A.npy");
        let got: Array2<f32> = read_npy(&r).expect("R.npy");
        assert_eq!(got.dim(), (7, 7));
        for row in got.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-5, "{row}");
        }
        let want = attention_rollout(probs.view().into_dyn(), &RolloutOptions::default())
            .unwrap()
            .into_dimensionality::<Ix2>()
            .unwrap();
        // The same forward pass twice: the same probabilities, so the same rollout.
        assert_eq!(got, want, "{backend}");
        let drawn = ok(&[
            "heatmap",
            "--weights",
            &r,
            "--tokens",
            &tok,
            "--values",
            "--out",
            "-",
        ]);
        assert!(
            drawn.starts_with("<svg") && drawn.contains("[CLS]"),
            "{backend}"
        );
        // The residual weight reaches the computation: r = 1 is the identity.
        ok(&[
            &["model", "rollout", "--out", &r, "--residual", "1"][..],
            &common,
        ]
        .concat());
        let id: Array2<f32> = read_npy(&r).expect("R.npy");
        assert_eq!(id, Array2::<f32>::eye(7));
    }
}

#[test]
fn bad_rollout_input_exits_2_naming_the_flag() {
    let t = TempDir::new("model-rollout-bad");
    let m = model_dir(&t);
    let out = t.arg("r.npy");
    let tok = t.arg("t.json");
    let run = |extra: &[&str]| {
        let mut args = vec!["model", "rollout", "--model", &m, "--text", "the cat"];
        args.extend(["--out", &out, "--tokens-out", &tok]);
        args.extend(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let check = |what: &str, args: Vec<String>, needle: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(what, &args, needle);
        assert!(!t.path("r.npy").exists(), "{what}: an output was written");
        assert!(!t.path("t.json").exists(), "{what}: an output was written");
    };
    for residual in ["-0.5", "1.5", "NaN", "inf"] {
        check(residual, run(&["--residual", residual]), "--residual");
    }
    check("not a number", run(&["--residual", "half"]), "--residual");
    for (what, args, needle) in model_text_out_cases(&t, &run, "--out", "r.npy") {
        check(what, args, needle);
    }
    let mut same = run(&[]);
    same[9] = out.clone();
    check("one file for both outputs", same, "--tokens-out");
    let mut no_out = run(&[]);
    no_out.drain(6..8);
    check("no --out", no_out, "--out");
}

/// `model heads` prints one line per layer × head and writes the same numbers as JSON:
/// those of `viz::head_stats` on the attention `model attention` writes, on both backends.
#[test]
fn heads_are_the_head_stats_of_the_attention() {
    let t = TempDir::new("model-heads");
    let m = model_dir(&t);
    let text = "the cat ate the fish";
    for backend in ["gpu", "cpu"] {
        let (a, j) = (
            t.arg(&format!("a-{backend}.npy")),
            t.arg(&format!("h-{backend}.json")),
        );
        let common = ["--model", &m, "--text", text, "--backend", backend];
        ok(&[&["model", "attention", "--out", &a][..], &common].concat());
        let table = ok(&[&["model", "heads", "--json", &j][..], &common].concat());
        let probs: Array4<f32> = read_npy(&a).expect("A.npy");
        let want = head_stats(probs.view().into_dyn()).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + LAYERS * HEADS, "{table}");
        assert!(lines[0].contains("entropy") && lines[0].contains("nearest"));
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&j).expect("json")).expect("parses");
        assert_eq!(doc["tokens"].as_array().unwrap().len(), 7);
        assert_eq!(doc["tokens"][0], "[CLS]");
        assert_eq!(doc["entropy_unit"], "nats");
        let heads = doc["heads"].as_array().expect("heads");
        assert_eq!(heads.len(), LAYERS * HEADS);
        for ((h, line), got) in want.stats.iter().zip(&lines[1..]).zip(heads) {
            let near = h.nearest.expect("more than one head");
            // The same forward pass twice: the same probabilities, so the same numbers.
            assert_eq!(got["layer"], h.layer);
            assert_eq!(got["head"], h.head);
            // serde_json's parser may be an ulp off the digits it wrote.
            let same = |key: &str, want: f64| {
                let x = got[key].as_f64().unwrap_or(f64::NAN);
                assert!((x - want).abs() <= 1e-12, "{backend} {key}: {x} vs {want}");
            };
            same("entropy", h.entropy);
            same("previous_token", h.previous_token);
            same("first_token", h.first_token);
            same("distance", near.distance);
            assert_eq!(got["nearest"], serde_json::json!([near.layer, near.head]));
            let cells: Vec<&str> = line.split_whitespace().collect();
            let shown = |x: f64| format!("{x:.4}");
            assert_eq!(
                cells,
                [
                    h.layer.to_string(),
                    h.head.to_string(),
                    shown(h.entropy),
                    shown(h.previous_token),
                    shown(h.first_token),
                    format!("{}:{}", near.layer, near.head),
                    shown(near.distance),
                ],
                "{backend}: {line}"
            );
        }
        // With the JSON on standard output, the table goes to stderr.
        let out = cli(&[&["model", "heads", "--json", "-"][..], &common].concat());
        assert!(out.status.success(), "{}", stderr_of(&out));
        let streamed: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
        assert_eq!(streamed, doc, "{backend}");
        assert_eq!(stderr_of(&out).lines().count(), 1 + LAYERS * HEADS);
    }
}

#[test]
fn bad_heads_input_exits_2_naming_the_flag() {
    let t = TempDir::new("model-heads-bad");
    let m = model_dir(&t);
    let json = t.arg("h.json");
    let run = |extra: &[&str]| {
        let mut args = vec!["model", "heads", "--model", &m, "--text", "the cat"];
        args.extend(["--json", &json]);
        args.extend(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let check = |what: &str, args: Vec<String>, needle: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(what, &args, needle);
        assert!(!t.path("h.json").exists(), "{what}: an output was written");
    };
    for (what, args, needle) in model_text_out_cases(&t, &run, "--json", "h.json") {
        check(what, args, needle);
    }
    let mut no_text = run(&[]);
    no_text.drain(4..6);
    check("no --text", no_text, "--text");
}

/// The bad inputs every `model COMMAND --model M --text T OUT_FLAG FILE` shares, from
/// `run` (which returns those arguments, then its own extra ones): a bad backend, a
/// missing model, an empty and a too long text, an output in a missing folder; each with
/// the flag its error must name.
fn model_text_out_cases(
    t: &TempDir,
    run: &dyn Fn(&[&str]) -> Vec<String>,
    out_flag: &'static str,
    out_file: &str,
) -> Vec<(&'static str, Vec<String>, &'static str)> {
    let mut missing = run(&[]);
    missing[3] = t.arg("nowhere");
    let mut empty = run(&[]);
    empty[5] = String::new();
    let mut long = run(&[]);
    long[5] = "the ".repeat(POSITIONS);
    let mut no_dir = run(&[]);
    no_dir[7] = t.arg(&format!("no/such/dir/{out_file}"));
    vec![
        ("bad backend", run(&["--backend", "tpu"]), "--backend"),
        ("missing model", missing, "--model"),
        ("empty text", empty, "--text"),
        ("too long text", long, "--text"),
        ("output directory missing", no_dir, out_flag),
    ]
}

#[test]
fn unfetched_model_names_say_how_to_fetch() {
    let t = TempDir::new("model-unfetched");
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
        .args(["model", "info", "--model", "minilm"])
        .env("WGPU_ATTENTION_MODELS", t.arg("empty-cache"))
        .output()
        .expect("run");
    let msg = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert!(
        msg.contains("--model") && msg.contains("fetch-models.sh"),
        "{msg}"
    );
}

/// `model generate --max-new-tokens 0` runs nothing and says so, on both backends,
/// rather than printing a rate over no time.
#[test]
fn generating_no_tokens_reports_no_rate() {
    let t = TempDir::new("generate-zero");
    let gguf = t.raw("tiny.gguf", &crate::model_llama::tiny::tiny_gguf(true));
    for backend in ["cpu", "gpu"] {
        let out = cli(&[
            "model",
            "generate",
            "--model",
            &gguf,
            "--text",
            "a the",
            "--max-new-tokens",
            "0",
            "--backend",
            backend,
        ]);
        let err = stderr_of(&out);
        assert!(out.status.success(), "{backend}: {err}");
        assert!(
            err.contains("nothing generated (--max-new-tokens 0)"),
            "{backend}: {err}"
        );
        assert!(!err.contains("inf tokens/s"), "{backend}: {err}");
    }
}

/// A model whose `model.safetensors` is longer or shorter than its header promises (3 GB
/// of a sparse file behind a small header; a truncated download) is refused from the
/// header under a 1 GB address-space limit, naming `--model` and both lengths: the
/// weights are not read first.
#[test]
fn model_weights_longer_or_shorter_than_their_header_are_refused_unread() {
    let t = TempDir::new("model-weights-length");
    let m = model_dir(&t);
    let weights = std::path::Path::new(&m).join("model.safetensors");
    let real = std::fs::metadata(&weights).expect("weights").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .expect("open the weights");
    for (len, says) in [
        (
            3u64 << 30,
            format!("more than the {real} its header promises"),
        ),
        (
            real - 5,
            format!("5 fewer than the {real} its header promises"),
        ),
    ] {
        file.set_len(len).expect("resize the weights");
        let out = cli_limited("ulimit -v 1000000", &["model", "info", "--model", &m]);
        assert_bad_input_output(&format!("weights of {len} bytes"), &out, "--model");
        assert!(stderr_of(&out).contains(&says), "{}", stderr_of(&out));
    }
}
