//! The BERT family without downloaded files: a tiny random BERT built in memory, CPU
//! (float64) against GPU, its tokenizer, and every malformed input a loader can meet.
//! The real all-MiniLM-L6-v2 against the numpy fixtures is tests/it/model_bert_real.rs.

use crate::bert_tiny::{tiny_bert, TinyBert, HEADS, HIDDEN, LAYERS, POSITIONS, VOCAB};
use crate::common::ctx;
use ndarray::{Array1, Array2};
use wgpu_attention::model::bert::{sentence_embedding, sentence_embedding_masked, BertModel};
use wgpu_attention::model::{GenerateOptions, Model, ModelError};

fn model(m: &TinyBert) -> BertModel {
    BertModel::from_parts(m.config.as_bytes(), &m.safetensors, m.tokenizer.as_bytes())
        .unwrap_or_else(|e| panic!("tiny model: {e}"))
}

/// Every element within `atol + rtol * |ref|`, naming the worst one.
fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst = (0usize, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let excess = (f64::from(g) - f64::from(w)).abs() / (atol + rtol * f64::from(w).abs());
        // NaN compares false: count it as the worst.
        if excess.is_nan() || excess > worst.1 {
            worst = (
                i,
                if excess.is_nan() {
                    f64::INFINITY
                } else {
                    excess
                },
            );
        }
    }
    let (i, excess) = worst;
    assert!(
        excess <= 1.0,
        "{what}: element {i} is {} against {} ({excess:.2} x the bound)",
        got[i],
        want[i]
    );
}

fn ids(n: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7 + 3) % VOCAB.len()) as u32).collect()
}

#[test]
fn tiny_bert_gpu_and_fast_cpu_match_the_reference() {
    let m = model(&tiny_bert(1));
    let gpu = m.upload(ctx()).expect("upload");
    // 1 token, lengths around the linear kernel's 16-row tiles, and every position.
    for len in [1, 5, 15, 16, 17, POSITIONS] {
        let ids = ids(len);
        let cpu = m.forward_reference(&ids, true).expect("reference forward");
        // The fast f32 CPU path is one more path checked against the reference.
        let fast = m.forward_cpu(&ids, true).expect("fast cpu forward");
        assert_close(
            &format!("fast cpu hidden, L = {len}"),
            fast.hidden.as_slice().unwrap(),
            cpu.hidden.as_slice().unwrap(),
            1e-4,
            1e-4,
        );
        assert_close(
            &format!("fast cpu attention, L = {len}"),
            fast.attention.as_ref().unwrap().as_slice().unwrap(),
            cpu.attention.as_ref().unwrap().as_slice().unwrap(),
            2e-4,
            1e-3,
        );
        let got = pollster::block_on(gpu.forward(ctx(), &ids, true)).expect("gpu forward");
        let (ca, ga) = (
            cpu.attention.expect("cpu attention"),
            got.attention.expect("gpu attention"),
        );
        assert_eq!(ga.dim(), (LAYERS, HEADS, len, len));
        assert_close(
            &format!("attention, L = {len}"),
            ga.as_slice().unwrap(),
            ca.as_slice().unwrap(),
            2e-4,
            1e-3,
        );
        for row in ga.rows() {
            let sum: f32 = row.sum();
            assert!((sum - 1.0).abs() < 1e-5, "L = {len}: a row sums to {sum}");
        }
        assert_eq!(got.hidden.dim(), (len, HIDDEN));
        assert_close(
            &format!("hidden, L = {len}"),
            got.hidden.as_slice().unwrap(),
            cpu.hidden.as_slice().unwrap(),
            1e-4,
            1e-4,
        );
        assert!(got.logits.is_none() && cpu.logits.is_none());
        // Without probabilities (another attention kernel may run) the result holds too.
        let plain = pollster::block_on(gpu.forward(ctx(), &ids, false)).expect("gpu forward");
        assert!(plain.attention.is_none());
        assert_close(
            &format!("hidden without weights, L = {len}"),
            plain.hidden.as_slice().unwrap(),
            cpu.hidden.as_slice().unwrap(),
            1e-4,
            1e-4,
        );
    }
    crate::common::assert_built_kernels_are_listed();
}

#[test]
fn tiny_bert_cpu_attention_is_softmax_of_finite_rows() {
    let m = model(&tiny_bert(2));
    let out = m.forward_reference(&ids(9), true).expect("forward");
    let a = out.attention.expect("attention");
    assert!(a.iter().all(|p| p.is_finite() && *p >= 0.0));
    for row in a.rows() {
        assert!((row.sum() - 1.0).abs() < 1e-6);
    }
    // Different weights give different outputs: the forward reads them.
    let other = model(&tiny_bert(3))
        .forward_reference(&ids(9), true)
        .expect("forward");
    assert_ne!(other.hidden, out.hidden);
}

#[test]
fn tiny_tokenizer_keeps_special_tokens_and_splits_words() {
    let m = model(&tiny_bert(1));
    let tokens = m.tokenize("The cat sat on the MAT").expect("tokenize");
    let texts: Vec<&str> = tokens.iter().map(|t| t.raw.as_str()).collect();
    assert_eq!(
        texts,
        ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    );
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    assert_eq!(ids, [2, 4, 5, 6, 7, 4, 8, 3]);
    let texts: Vec<String> = m
        .tokenize("cats love zebras!")
        .expect("tokenize")
        .into_iter()
        .map(|t| t.raw)
        .collect();
    assert_eq!(
        texts,
        ["[CLS]", "cat", "##s", "love", "[UNK]", "!", "[SEP]"]
    );
    // Padding and truncation are off: a long text keeps every token.
    let long = "the ".repeat(300);
    assert_eq!(m.tokenize(&long).expect("tokenize").len(), 302);
    assert_eq!(
        m.decode(&[2, 5, 13, 3]).expect("decode"),
        "[CLS] cats [SEP]"
    );
}

#[test]
fn info_reports_sizes_and_hashes() {
    let t = tiny_bert(1);
    let info = model(&t).info();
    assert_eq!(info.architecture, "bert");
    assert_eq!(
        (info.layers, info.heads, info.kv_heads),
        (LAYERS, HEADS, HEADS)
    );
    assert_eq!((info.hidden, info.head_dim), (HIDDEN, HIDDEN / HEADS));
    assert_eq!((info.vocab, info.max_positions), (VOCAB.len(), POSITIONS));
    assert!(!info.causal);
    assert!(info.tokenizer.contains("WordPiece"), "{}", info.tokenizer);
    let names: Vec<&str> = info.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["config.json", "model.safetensors", "tokenizer.json"]
    );
    assert_eq!(
        info.files[1].1,
        wgpu_attention::model::sha256_hex(&t.safetensors)
    );
    // sha256 of the empty string.
    assert_eq!(
        wgpu_attention::model::sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn sentence_embedding_is_the_normalised_mean() {
    let hidden = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32 - 5.0);
    let e = sentence_embedding(hidden.view());
    let mean: Vec<f64> = (0..4)
        .map(|j| (0..3).map(|i| f64::from(hidden[[i, j]])).sum::<f64>() / 3.0)
        .collect();
    let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
    for j in 0..4 {
        assert!((f64::from(e[j]) - mean[j] / norm).abs() < 1e-7);
    }
    // A masked-out row does not count.
    let mut padded = Array2::<f32>::from_elem((4, 4), 100.0);
    padded.slice_mut(ndarray::s![..3, ..]).assign(&hidden);
    let mask = Array1::from_vec(vec![1.0, 1.0, 1.0, 0.0]);
    assert_eq!(sentence_embedding_masked(padded.view(), mask.view()), e);
}

fn load_err(t: &TinyBert) -> ModelError {
    match BertModel::from_parts(t.config.as_bytes(), &t.safetensors, t.tokenizer.as_bytes()) {
        Ok(_) => panic!("a malformed model loaded"),
        Err(e) => e,
    }
}

fn with_tensors(f: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<f32>)>)) -> TinyBert {
    let mut t = crate::bert_tiny::tensors(1);
    f(&mut t);
    TinyBert {
        safetensors: crate::bert_tiny::safetensors_of(&t),
        ..tiny_bert(1)
    }
}

#[test]
fn missing_or_misshapen_tensors_are_named() {
    let name = "encoder.layer.1.intermediate.dense.weight";
    let gone = with_tensors(|t| t.retain(|(n, _, _)| n != name));
    let e = load_err(&gone);
    assert!(
        matches!(e, ModelError::Format { .. }) && e.is_input_error(),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(name) && e.to_string().contains("missing"),
        "{e}"
    );

    let bent = with_tensors(|t| {
        let entry = t.iter_mut().find(|(n, _, _)| n == name).unwrap();
        entry.1 = vec![entry.1[1], entry.1[0]];
    });
    let e = load_err(&bent);
    assert!(
        e.to_string().contains(name) && e.to_string().contains("shape"),
        "{e}"
    );

    // The same tensors under `bert.` (as BertForMaskedLM checkpoints name them) load.
    let prefixed = with_tensors(|t| t.iter_mut().for_each(|(n, _, _)| *n = format!("bert.{n}")));
    model(&prefixed);

    let mut garbage = tiny_bert(1);
    garbage.safetensors = vec![0xff; 64];
    assert!(load_err(&garbage).to_string().contains("model.safetensors"));
    garbage.safetensors.truncate(3);
    assert!(load_err(&garbage).to_string().contains("model.safetensors"));
}

#[test]
fn bad_configs_and_tokenizers_are_rejected() {
    let cases: &[(&str, &str)] = &[
        ("{", "config.json"),
        (r#"{"hidden_size": 32}"#, "config.json"),
        (
            &crate::bert_tiny::config_json()
                .replace("\"num_attention_heads\": 4", "\"num_attention_heads\": 5"),
            "multiple",
        ),
        (
            &crate::bert_tiny::config_json()
                .replace("\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\""),
            "hidden_act",
        ),
        (
            &crate::bert_tiny::config_json()
                .replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 0"),
            "num_hidden_layers",
        ),
        (
            &crate::bert_tiny::config_json()
                .replace("\"vocab_size\": 20", "\"vocab_size\": 99999999999"),
            "vocab_size",
        ),
        (
            &crate::bert_tiny::config_json()
                .replace("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": -1"),
            "layer_norm_eps",
        ),
    ];
    for (config, needle) in cases {
        let t = TinyBert {
            config: config.to_string(),
            ..tiny_bert(1)
        };
        let e = load_err(&t);
        assert!(e.is_input_error(), "{e:?}");
        assert!(e.to_string().contains(needle), "{config}: {e}");
    }
    // A config whose sizes disagree with the tensors names the first tensor it checks.
    let t = TinyBert {
        config: crate::bert_tiny::config_json()
            .replace("\"intermediate_size\": 40", "\"intermediate_size\": 41"),
        ..tiny_bert(1)
    };
    assert!(load_err(&t)
        .to_string()
        .contains("intermediate.dense.weight"));
    for tokenizer in ["", "{}", "[1, 2]", "{\"model\": 3}"] {
        let t = TinyBert {
            tokenizer: tokenizer.to_string(),
            ..tiny_bert(1)
        };
        assert!(
            load_err(&t).to_string().contains("tokenizer.json"),
            "{tokenizer:?}"
        );
    }
}

#[test]
fn bad_ids_and_texts_are_input_errors() {
    let m = model(&tiny_bert(1));
    let gpu = m.upload(ctx()).expect("upload");
    let too_long = ids(POSITIONS + 1);
    let out_of_vocab = [2, VOCAB.len() as u32, 3];
    for (bad, arg) in [
        (&[][..], "ids"),
        (&too_long[..], "--text"),
        (&out_of_vocab[..], "ids"),
    ] {
        for e in [
            m.forward_cpu(bad, true).err(),
            m.forward_reference(bad, true).err(),
            pollster::block_on(gpu.forward(ctx(), bad, true)).err(),
        ] {
            match e {
                Some(ModelError::Input { arg: a, .. }) => assert_eq!(a, arg),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
    for text in ["", "   \n"] {
        assert!(matches!(
            m.tokenize(text),
            Err(ModelError::Input { arg: "--text", .. })
        ));
    }
    let opts = GenerateOptions::default();
    let e = m.generate_cpu(&[2, 3], &opts, &mut |_| {}).unwrap_err();
    assert!(
        matches!(e, ModelError::Input { arg: "--model", .. }),
        "{e:?}"
    );
    let e = pollster::block_on(gpu.generate(ctx(), &[2, 3], &opts, &mut |_| {})).unwrap_err();
    assert!(
        matches!(e, ModelError::Input { arg: "--model", .. }),
        "{e:?}"
    );
}

#[test]
fn model_load_picks_the_family_from_the_path() {
    let dir = std::env::temp_dir().join(format!("wgpu-attention-bert-{}", std::process::id()));
    crate::bert_tiny::write_dir(&dir, &tiny_bert(1));
    let m = Model::load(&dir).expect("load the tiny model directory");
    assert!(matches!(m, Model::Bert(_)));
    assert_eq!(m.info().layers, LAYERS);
    // A missing file in the directory is an Io error naming it.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let e = Model::load(&dir).err().expect("no tokenizer");
    assert!(
        matches!(e, ModelError::Io { .. }) && e.to_string().contains("tokenizer.json"),
        "{e}"
    );
    // Neither a directory nor a .gguf file.
    let e = Model::load(&dir.join("config.json"))
        .err()
        .expect("a json file");
    assert!(
        matches!(e, ModelError::Io { .. }) && e.is_input_error(),
        "{e:?}"
    );
    let e = Model::load(&dir.join("nothing-here"))
        .err()
        .expect("nothing");
    assert!(e.to_string().contains("no such file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timed_forwards_report_every_stage_and_the_same_result() {
    let m = model(&tiny_bert(4));
    let gpu = m.upload(ctx()).expect("upload");
    let ids = ids(6);
    let (cpu, cpu_t) = m.forward_cpu_timed(&ids, true).expect("timed cpu");
    assert_eq!(cpu.hidden, m.forward_cpu(&ids, true).unwrap().hidden);
    let (got, gpu_t) = pollster::block_on(gpu.forward_timed(ctx(), &ids, true)).expect("timed gpu");
    assert_close(
        "timed gpu hidden",
        got.hidden.as_slice().unwrap(),
        cpu.hidden.as_slice().unwrap(),
        1e-4,
        1e-4,
    );
    for t in [&cpu_t, &gpu_t] {
        let names: Vec<&str> = t.entries().iter().map(|(n, _)| *n).collect();
        for stage in ["embeddings + LayerNorm", "q, k, v projections", "attention"] {
            assert!(names.contains(&stage), "{stage} missing from {names:?}");
        }
        // Its own stage on the CPU, fused into the intermediate dense on the GPU.
        assert!(
            names.iter().any(|n| n.contains("GELU")),
            "GELU missing from {names:?}"
        );
        assert!(t.total() > 0.0 && t.entries().iter().all(|(_, s)| *s >= 0.0));
    }
}
