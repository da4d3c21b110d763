//! Each layer's attention inputs from the models' GPU passes (`attention_inputs`) give back
//! the layers' attention through `attention_patterns`; a patched head (`forward_patched`)
//! changes the rest of the pass as the float64 reference says; and `model attention`'s pattern
//! flags (`--layers`, `--heads`, `--rows`, `--cols`, `--pool`, `--entropy`) equal the
//! full weights reduced here, with bad input refused naming the flag.

use ndarray::{s, Array3, Array4};
use ndarray_npy::read_npy;
use wgpu_attention::model::bert::BertModel;
use wgpu_attention::model::{HeadPatch, LayerInputs, Model, ModelError};
use wgpu_attention::{attention_patterns, attention_reference, AttentionOptions, PatternOptions};

use crate::bert_tiny::{tiny_bert, HEADS, LAYERS};
use crate::cli_common::{assert_bad_input, cli, stderr_of, TempDir};
use crate::common::{assert_close, ctx};

/// The model's own attention per layer against the weights recomputed from its inputs.
fn check_inputs(what: &str, model: &Model, ids: &[u32]) {
    let info = model.info();
    let gpu = model.upload(ctx()).expect("upload");
    let full = pollster::block_on(gpu.forward(ctx(), ids, true))
        .expect("forward")
        .attention
        .expect("attention");
    let inputs = pollster::block_on(gpu.attention_inputs(ctx(), ids)).expect("inputs");
    assert_eq!(inputs.len(), info.layers, "{what}: one entry per layer");
    let opts = AttentionOptions {
        causal: info.causal,
        ..Default::default()
    };
    let ask = PatternOptions {
        weights: true,
        ..Default::default()
    };
    let l = ids.len();
    for (n, LayerInputs { q, k, v }) in inputs.iter().enumerate() {
        assert_eq!(q.shape(), [1, info.heads, l, info.head_dim], "{what}: q");
        assert_eq!(k.shape(), [1, info.kv_heads, l, info.head_dim], "{what}: k");
        assert_eq!(v.shape(), k.shape(), "{what}: v");
        let got = attention_patterns(ctx(), q.view(), k.view(), &opts, &ask).expect("patterns");
        let w = got.weights.expect("weights");
        let want = full.slice(s![n..n + 1, .., .., ..]);
        assert_close(&format!("{what}, layer {n}"), w.view(), want, 1e-5, 1e-4);
    }
}

#[test]
fn every_layers_inputs_give_back_its_attention() {
    let b = tiny_bert(2);
    let bert = BertModel::from_parts(b.config.as_bytes(), &b.safetensors, b.tokenizer.as_bytes())
        .expect("tiny bert");
    let ids: Vec<u32> = (0..11).map(|i| (i * 5 + 1) % 9).collect();
    check_inputs("bert", &Model::Bert(Box::new(bert)), &ids);
    let llama = crate::model_llama::tiny_model::tiny_model(4, true);
    let ids: Vec<u32> = (0..19).map(|i| (i * 37 + 11) % 256).collect();
    check_inputs("llama", &Model::Llama(Box::new(llama)), &ids);
}

fn largest_gap(a: &ndarray::Array2<f32>, b: &ndarray::Array2<f32>) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Patching a head with its own output changes nothing; patching it with its causal
/// version changes the rest of the pass exactly as the float64 reference does.
fn check_patch(what: &str, model: &Model, ids: &[u32]) {
    let info = model.info();
    let gpu = model.upload(ctx()).expect("upload");
    let plain = pollster::block_on(gpu.forward(ctx(), ids, false)).expect("forward");
    let inputs = pollster::block_on(gpu.attention_inputs(ctx(), ids)).expect("inputs");
    let (layer, head) = (info.layers - 1, info.heads - 1);
    let kv = head / (info.heads / info.kv_heads);
    let one = |a: &Array4<f32>, h: usize| a.slice(s![.., h..h + 1, .., ..]).to_owned();
    let (q, k, v) = (
        one(&inputs[layer].q, head),
        one(&inputs[layer].k, kv),
        one(&inputs[layer].v, kv),
    );
    let head_out = |causal: bool| {
        let opts = AttentionOptions {
            causal,
            ..Default::default()
        };
        let out = attention_reference(q.view(), k.view(), v.view(), &opts).expect("reference");
        out.out.slice(s![0, 0, .., ..]).to_owned()
    };
    let own = HeadPatch {
        layer,
        head,
        out: head_out(info.causal),
    };
    let same = pollster::block_on(gpu.forward_patched(ctx(), ids, &own)).expect("patched");
    let gap = largest_gap(&same.hidden, &plain.hidden);
    assert!(
        gap < 1e-4,
        "{what}: the head's own output moved the hidden state by {gap}"
    );
    let changed = HeadPatch {
        out: head_out(!info.causal),
        ..own.clone()
    };
    let got = pollster::block_on(gpu.forward_patched(ctx(), ids, &changed)).expect("patched");
    let want = model
        .forward_reference_patched(ids, &changed)
        .expect("reference patched");
    assert_close(
        &format!("{what}: patched hidden"),
        got.hidden.view(),
        want.hidden.view(),
        2e-4,
        1e-3,
    );
    if let (Some(g), Some(w)) = (&got.logits, &want.logits) {
        assert_close(
            &format!("{what}: patched logits"),
            g.view(),
            w.view(),
            2e-4,
            1e-3,
        );
    }
    let moved = largest_gap(&want.hidden, &plain.hidden);
    assert!(
        moved > 1e-3,
        "{what}: the changed head moved nothing ({moved})"
    );
    // Bad patches name the argument.
    let d = info.head_dim;
    let bad = [
        HeadPatch {
            layer: info.layers,
            ..own.clone()
        },
        HeadPatch {
            head: info.heads,
            ..own.clone()
        },
        HeadPatch {
            out: ndarray::Array2::zeros((ids.len() + 1, d)),
            ..own.clone()
        },
        HeadPatch {
            out: ndarray::Array2::from_elem((ids.len(), d), f32::NAN),
            ..own.clone()
        },
    ];
    for p in &bad {
        for e in [
            pollster::block_on(gpu.forward_patched(ctx(), ids, p)).unwrap_err(),
            model.forward_reference_patched(ids, p).unwrap_err(),
        ] {
            assert!(
                matches!(e, ModelError::Input { arg: "patch", .. }),
                "{what}: {e}"
            );
        }
    }
}

#[test]
fn a_patched_head_changes_the_rest_of_the_pass_as_the_reference_does() {
    let b = tiny_bert(3);
    let bert = BertModel::from_parts(b.config.as_bytes(), &b.safetensors, b.tokenizer.as_bytes())
        .expect("tiny bert");
    let ids: Vec<u32> = (0..9).map(|i| (i * 5 + 2) % 9).collect();
    check_patch("bert", &Model::Bert(Box::new(bert)), &ids);
    let llama = crate::model_llama::tiny_model::tiny_model(6, false);
    let ids: Vec<u32> = (0..13).map(|i| (i * 31 + 7) % 256).collect();
    check_patch("llama", &Model::Llama(Box::new(llama)), &ids);
}

fn ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

#[test]
fn the_pattern_flags_equal_the_full_weights_reduced() {
    let t = TempDir::new("model-patterns");
    crate::bert_tiny::write_dir(&t.path("tiny"), &tiny_bert(1));
    let m = t.arg("tiny");
    let text = "the cat ate the fish and the dog sat";
    let (full, pooled, maxes, entropy, labels, window) = (
        t.arg("a.npy"),
        t.arg("p.npy"),
        t.arg("m.npy"),
        t.arg("e.npy"),
        t.arg("p.json"),
        t.arg("w.npy"),
    );
    let base = ["model", "attention", "--model", &m, "--text", text];
    ok(&[&base[..], &["--out", &full]].concat());
    let a: Array4<f32> = read_npy(t.path("a.npy")).expect("full");
    let l = a.shape()[2];
    ok(&[
        &base[..],
        &[
            "--pool",
            "3",
            "--out",
            &pooled,
            "--pool-max-out",
            &maxes,
            "--entropy",
            &entropy,
            "--tokens-out",
            &labels,
        ],
    ]
    .concat());
    let p: Array4<f32> = read_npy(t.path("p.npy")).expect("pooled");
    let mx: Array4<f32> = read_npy(t.path("m.npy")).expect("max");
    let e: Array3<f32> = read_npy(t.path("e.npy")).expect("entropy");
    assert_eq!(p.shape(), [LAYERS, HEADS, 3, 3]);
    assert_eq!(e.shape(), [LAYERS, HEADS, l]);
    let edges: Vec<usize> = (0..=3).map(|c| c * l / 3).collect();
    let mut want_p = Array4::<f32>::zeros((LAYERS, HEADS, 3, 3));
    let mut want_m = want_p.clone();
    let mut want_e = Array3::<f32>::zeros((LAYERS, HEADS, l));
    for ((layer, h, r, c), cell) in want_p.indexed_iter_mut() {
        let block = a.slice(s![layer, h, edges[r]..edges[r + 1], edges[c]..edges[c + 1]]);
        let mass: f64 = block.iter().map(|&w| f64::from(w)).sum();
        *cell = (mass / block.nrows() as f64) as f32;
        want_m[[layer, h, r, c]] = block.iter().cloned().fold(0.0, f32::max);
    }
    for ((layer, h, i), cell) in want_e.indexed_iter_mut() {
        let row = a.slice(s![layer, h, i, ..]);
        let ent: f64 = row
            .iter()
            .filter(|&&w| w > 0.0)
            .map(|&w| -f64::from(w) * f64::from(w).ln())
            .sum();
        *cell = ent as f32;
    }
    assert_close("pooled mass", p.view(), want_p.view(), 1e-5, 1e-4);
    assert_close("pooled max", mx.view(), want_m.view(), 1e-5, 1e-4);
    assert_close("entropy", e.view(), want_e.view(), 1e-5, 1e-4);
    let json: Vec<String> =
        serde_json::from_slice(&std::fs::read(t.path("p.json")).unwrap()).unwrap();
    assert_eq!(json.len(), 3, "{json:?}");
    assert!(
        json[0].starts_with(&format!("0-{} ", edges[1] - 1)),
        "{json:?}"
    );
    // The pooled map draws like any attention matrix.
    ok(&[
        "heatmap",
        "--weights",
        &pooled,
        "--tokens",
        &labels,
        "--layer",
        "1",
        "--head",
        "2",
        "--out",
        &t.arg("p.svg"),
    ]);

    ok(&[
        &base[..],
        &[
            "--layers", "1", "--heads", "3,0", "--rows", "2..5", "--cols", "1..7", "--out", &window,
        ],
    ]
    .concat());
    let w: Array4<f32> = read_npy(t.path("w.npy")).expect("window");
    let want = a
        .slice(s![1..2, .., 2..5, 1..7])
        .select(ndarray::Axis(1), &[3, 0]);
    assert_close("window", w.view(), want.view(), 1e-5, 1e-4);
}

#[test]
fn bad_pattern_flags_are_refused_naming_the_flag() {
    let t = TempDir::new("model-patterns-bad");
    crate::bert_tiny::write_dir(&t.path("tiny"), &tiny_bert(1));
    let m = t.arg("tiny");
    let out = t.arg("never.npy");
    let base = ["model", "attention", "--model", &m, "--text", "the cat"];
    for (what, extra, needle) in [
        ("head out of range", &["--heads", "0,4"][..], "--heads"),
        ("layer out of range", &["--layers", "2"], "--layers"),
        ("a head twice", &["--heads", "1,1"], "--heads"),
        ("rows past the text", &["--rows", "0..40"], "--rows"),
        ("empty rows", &["--rows", "3..3"], "--rows"),
        ("cols not a range", &["--cols", "2"], "--cols"),
        ("pool of 0", &["--pool", "0"], "--pool"),
        ("pool too fine", &["--pool", "1025"], "--pool"),
        (
            "cpu backend",
            &["--pool", "2", "--backend", "cpu"],
            "--backend",
        ),
        ("stages", &["--pool", "2", "--stages"], "--stages"),
        (
            "max without pool",
            &["--heads", "1", "--pool-max-out", "m.npy"],
            "--pool",
        ),
    ] {
        assert_bad_input(what, &[&base[..], extra, &["--out", &out]].concat(), needle);
        assert!(!t.path("never.npy").exists(), "{what}: wrote an output");
    }
}
