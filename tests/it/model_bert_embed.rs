//! Sentence embeddings (`BertModel::embed`, `model embed`, `model similarity`): a batch of
//! sentences of different lengths, padded and given per-sentence key lengths (in one pass,
//! and in the passes the adapter's plan cuts), against the float64 CPU path and each
//! sentence alone, on the tiny random BERT; and on the real
//! all-MiniLM-L6-v2 against the float64 numpy fixture of
//! tests/fixtures/models/bert/generate_batch.py (`real::`, ignored: needs the fetched
//! models; `cargo test --release --test it -- --ignored model_bert_embed::real::`).

use crate::bert_tiny::{tiny_bert, write_dir, POSITIONS};
use crate::cli_common::{assert_bad_input, cli, stderr_of, TempDir};
use crate::common::ctx;
use ndarray::{Array2, ArrayView1};
use ndarray_npy::read_npy;
use wgpu_attention::model::bert::{BertModel, Pooling, PoolingMode, SentenceConfig};
use wgpu_attention::model::ModelError;

/// Sentences of the tiny vocabulary, 3 to 24 tokens with [CLS] and [SEP], in no order of
/// length; the longest straddles the 16-row tiles of the dense layers.
const SENTENCES: &[&str] = &[
    "the cat sat on the mat",
    "i",
    "a dog ate the fish ! it was the cat ! the dog sat on a mat ! i love ai !",
    "i love ai !",
    "the cats sat",
    "it was a dog on the mat , the cat ate fish",
    "love",
    "the dog ate the fish and the cat sat on the mat",
];

fn tiny(pooling: Pooling) -> BertModel {
    let m = tiny_bert(3);
    let mut model =
        BertModel::from_parts(m.config.as_bytes(), &m.safetensors, m.tokenizer.as_bytes())
            .unwrap_or_else(|e| panic!("tiny model: {e}"));
    model.set_sentence_config(SentenceConfig {
        pooling,
        max_seq_length: None,
    });
    model
}

/// The largest |difference| between rows, naming the worst sentence and column.
fn assert_rows_close(what: &str, got: &Array2<f32>, want: &Array2<f64>, tol: f64) {
    assert_eq!(got.dim(), want.dim(), "{what}: shapes");
    let mut worst = (0, 0, 0.0f64);
    for ((i, j), &g) in got.indexed_iter() {
        let d = (f64::from(g) - want[[i, j]]).abs();
        if d.is_nan() || d > worst.2 {
            worst = (i, j, if d.is_nan() { f64::INFINITY } else { d });
        }
    }
    let (i, j, d) = worst;
    assert!(
        d <= tol,
        "{what}: sentence {i} column {j} is {} against {} (|diff| {d:.2e} > {tol:e})",
        got[[i, j]],
        want[[i, j]]
    );
}

fn embed(model: &BertModel, sentences: &[&str], batch: usize) -> Array2<f32> {
    let weights = model.upload(ctx()).expect("upload");
    pollster::block_on(model.embed(ctx(), &weights, sentences, batch))
        .unwrap_or_else(|e| panic!("embed, batch {batch}: {e}"))
}

#[test]
fn a_padded_batch_matches_the_cpu_path_and_each_sentence_alone() {
    let model = tiny(Pooling::MEAN_NORMALIZED);
    let lens: Vec<usize> = SENTENCES
        .iter()
        .map(|s| model.sentence_ids(s).expect("ids").len())
        .collect();
    assert!(
        lens.iter().max() > Some(&16) && lens.contains(&3),
        "{lens:?}"
    );
    let ids = model.tokenize_sentences(SENTENCES).expect("ids");
    let want = model.embed_ids_reference(&ids).expect("reference embed");
    let fast = model.embed_cpu(SENTENCES).expect("fast cpu embed");
    assert_rows_close(
        "fast cpu against float64",
        &fast.mapv(|v| v as f32),
        &want,
        1e-5,
    );
    // Rows are unit vectors: the norm is part of what is checked.
    for row in want.rows() {
        assert!((row.dot(&row) - 1.0).abs() < 1e-12);
    }
    let all = embed(&model, SENTENCES, 32);
    assert_rows_close("one batch against float64", &all, &want, 1e-5);
    // Every sentence padded into one pass, whatever passes the adapter's plan cuts.
    let weights = model.upload(ctx()).expect("upload");
    let ids = model.tokenize_sentences(SENTENCES).expect("ids");
    let pooling = Pooling::MEAN_NORMALIZED;
    let one_pass = weights.embed_ids_planned(ctx(), &ids, pooling, 32, None);
    let one_pass = pollster::block_on(one_pass).expect("one padded pass");
    assert_rows_close("one padded pass against float64", &one_pass, &want, 1e-5);
    // And cut wherever a pass costs more than the padding it saves.
    let cut = weights.embed_ids_planned(ctx(), &ids, pooling, 32, Some(0));
    let cut = pollster::block_on(cut).expect("passes of equal lengths");
    assert_rows_close("passes of equal lengths", &cut, &all.mapv(f64::from), 1e-5);
    for batch in [1, 3] {
        let got = embed(&model, SENTENCES, batch);
        assert_rows_close(
            &format!("batch {batch} against one batch"),
            &got,
            &all.mapv(f64::from),
            1e-5,
        );
    }
    for (i, s) in SENTENCES.iter().enumerate() {
        let alone = embed(&model, &[s], 1);
        let row = all.row(i).mapv(f64::from).insert_axis(ndarray::Axis(0));
        assert_rows_close(&format!("sentence {i} alone"), &alone, &row, 1e-5);
    }
}

#[test]
fn other_poolings_match_the_cpu_path() {
    for (mode, normalize) in [
        (PoolingMode::Mean, false),
        (PoolingMode::Max, true),
        (PoolingMode::Cls, false),
        (PoolingMode::MeanSqrtLen, true),
    ] {
        let model = tiny(Pooling { mode, normalize });
        let want = model.embed_cpu(SENTENCES).expect("cpu embed");
        let got = embed(&model, SENTENCES, 4);
        assert_rows_close(
            &format!("{mode:?}, normalize {normalize}"),
            &got,
            &want,
            2e-5,
        );
    }
}

fn input_arg(e: ModelError) -> (&'static str, String) {
    match e {
        ModelError::Input { arg, detail } => (arg, detail),
        other => panic!("not an input error: {other:?}"),
    }
}

#[test]
fn bad_sentences_and_batches_are_typed_errors() {
    let mut model = tiny(Pooling::MEAN_NORMALIZED);
    let weights = model.upload(ctx()).expect("upload");
    let run = |m: &BertModel, s: &[&str], batch| {
        pollster::block_on(m.embed(ctx(), &weights, s, batch)).map(|_| ())
    };
    let (arg, _) = input_arg(run(&model, &[], 4).unwrap_err());
    assert_eq!(arg, "sentences");
    let (arg, _) = input_arg(model.embed_cpu(&[]).unwrap_err());
    assert_eq!(arg, "sentences");
    let (arg, detail) = input_arg(run(&model, &["the cat", "  "], 4).unwrap_err());
    assert_eq!(arg, "sentences");
    assert!(detail.contains("sentence 1"), "{detail}");
    let (arg, _) = input_arg(run(&model, &["the cat"], 0).unwrap_err());
    assert_eq!(arg, "batch");
    // One token more than the positions (with [CLS] and [SEP]).
    let long = vec!["cat"; POSITIONS - 1].join(" ");
    let (arg, detail) = input_arg(run(&model, &["the cat", &long], 4).unwrap_err());
    assert_eq!(arg, "sentences");
    assert!(
        detail.contains("sentence 1") && detail.contains("25 tokens"),
        "{detail}"
    );
    // max_seq_length caps below the positions.
    model.set_sentence_config(SentenceConfig {
        pooling: Pooling::MEAN_NORMALIZED,
        max_seq_length: Some(5),
    });
    assert_eq!(model.max_sentence_tokens(), 5);
    assert!(model.sentence_ids("the cat sat").is_ok());
    let (_, detail) = input_arg(model.sentence_ids("the cat sat on").unwrap_err());
    assert!(detail.contains("max_seq_length"), "{detail}");
    // Ids outside the vocabulary, given directly.
    let bad = pollster::block_on(weights.embed_ids(
        ctx(),
        &[vec![2, 9999, 3]],
        Pooling::MEAN_NORMALIZED,
        1,
    ));
    assert!(matches!(bad, Err(ModelError::Input { .. })), "{bad:?}");
}

const MODULES: &str = r#"[
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
]"#;
const POOLING: &str = r#"{"word_embedding_dimension": 32, "pooling_mode_cls_token": false,
  "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
  "pooling_mode_mean_sqrt_len_tokens": false}"#;

/// The tiny model as a sentence-transformers directory, as all-MiniLM-L6-v2 ships.
fn sentence_dir(t: &TempDir) -> String {
    let dir = t.path("tiny");
    write_dir(&dir, &tiny_bert(3));
    std::fs::write(dir.join("modules.json"), MODULES).expect("write");
    std::fs::create_dir_all(dir.join("1_Pooling")).expect("mkdir");
    std::fs::write(dir.join("1_Pooling/config.json"), POOLING).expect("write");
    std::fs::write(
        dir.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 20}"#,
    )
    .expect("write");
    t.arg("tiny")
}

#[test]
fn the_pooling_comes_from_the_model_directory() {
    let t = TempDir::new("embed-dir");
    let dir = t.path("plain");
    write_dir(&dir, &tiny_bert(3));
    let plain = BertModel::load(&dir).expect("load");
    assert_eq!(plain.sentence_config(), &SentenceConfig::plain());
    let m = BertModel::load(std::path::Path::new(&sentence_dir(&t))).expect("load");
    assert_eq!(m.sentence_config().pooling, Pooling::MEAN_NORMALIZED);
    assert_eq!(m.max_sentence_tokens(), 20);
    // A Pooling module pointing outside the directory, and a second mode.
    let dir = t.path("tiny");
    std::fs::write(
        dir.join("modules.json"),
        MODULES.replace("1_Pooling", "../1_Pooling"),
    )
    .expect("write");
    assert!(BertModel::load(&dir).is_err());
    std::fs::write(dir.join("modules.json"), MODULES).expect("write");
    let two = POOLING.replace(
        r#""pooling_mode_max_tokens": false"#,
        r#""pooling_mode_max_tokens": true"#,
    );
    std::fs::write(dir.join("1_Pooling/config.json"), two).expect("write");
    assert!(matches!(
        BertModel::load(&dir),
        Err(ModelError::Unsupported(_))
    ));
}

fn ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn cosine(a: ArrayView1<'_, f32>, b: ArrayView1<'_, f32>) -> f64 {
    let dot = |x: ArrayView1<'_, f32>, y: ArrayView1<'_, f32>| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt()
}

#[test]
fn cli_embed_and_similarity() {
    let t = TempDir::new("embed-cli");
    let m = sentence_dir(&t);
    let (gpu, cpu, file) = (t.arg("gpu.npy"), t.arg("cpu.npy"), t.arg("file.npy"));
    let texts = [
        "the cat sat on the mat",
        "i love ai !",
        "a dog ate the fish",
    ];
    let mut args = vec!["model", "embed", "--model", &m, "--batch", "2"];
    for s in &texts {
        args.extend(["--text", s]);
    }
    let printed = ok(&[&args[..], &["--out", &gpu]].concat());
    assert!(
        printed.contains("(3, 32)") && printed.contains("mean pooling, L2-normalised"),
        "{printed}"
    );
    ok(&[&args[..], &["--out", &cpu, "--backend", "cpu"]].concat());
    let lines = t.raw(
        "s.txt",
        format!("{}\r\n{}\n{}\n", texts[0], texts[1], texts[2]).as_bytes(),
    );
    ok(&[
        "model", "embed", "--model", &m, "--input", &lines, "--out", &file,
    ]);
    let (g, c, f): (Array2<f32>, Array2<f32>, Array2<f32>) = (
        read_npy(&gpu).expect("npy"),
        read_npy(&cpu).expect("npy"),
        read_npy(&file).expect("npy"),
    );
    assert_eq!(g.dim(), (3, 32));
    assert_rows_close("gpu against cpu", &g, &c.mapv(f64::from), 1e-5);
    assert_rows_close("--input against --text", &f, &g.mapv(f64::from), 1e-6);
    let printed = ok(&[
        "model",
        "similarity",
        "--model",
        &m,
        "--text",
        texts[0],
        "--text",
        texts[2],
    ]);
    let cos: f64 = printed
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{printed}"));
    let want = cosine(g.row(0), g.row(2));
    assert!((cos - want).abs() < 1e-5, "similarity {cos} against {want}");
}

#[test]
fn cli_bad_input_exits_2_naming_the_flag() {
    let t = TempDir::new("embed-cli-bad");
    let m = sentence_dir(&t);
    let out = t.arg("e.npy");
    let base = [
        "model",
        "embed",
        "--model",
        m.as_str(),
        "--out",
        out.as_str(),
    ];
    fn join<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [base, extra].concat()
    }
    let empty = t.raw("empty.txt", b"");
    let blank = t.raw("blank.txt", b"the cat\n\ni love ai\n");
    let latin1 = t.raw("latin1.txt", b"caf\xe9\n");
    let long = vec!["cat"; 19].join(" ");
    let fifo = t.path("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let fifo = fifo.to_string_lossy().into_owned();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("no sentences", join(&base, &[]), "--text"),
        ("empty file", join(&base, &["--input", &empty]), "--input"),
        ("blank line", join(&base, &["--input", &blank]), "line 2"),
        ("not UTF-8", join(&base, &["--input", &latin1]), "--input"),
        ("a FIFO", join(&base, &["--input", &fifo]), "--input"),
        (
            "missing file",
            join(&base, &["--input", "/nonexistent/s.txt"]),
            "--input",
        ),
        (
            "empty text",
            join(&base, &["--text", "the cat", "--text", ""]),
            "--text: sentence 2",
        ),
        ("too long", join(&base, &["--text", &long]), "--text"),
        (
            "batch 0",
            join(&base, &["--text", "the cat", "--batch", "0"]),
            "--batch",
        ),
        (
            "both",
            join(&base, &["--text", "the cat", "--input", &blank]),
            "--input",
        ),
        (
            "one sentence to compare",
            vec!["model", "similarity", "--model", &m, "--text", "the cat"],
            "--text",
        ),
    ];
    for (what, args, needle) in cases {
        assert_bad_input(what, &args, needle);
        assert!(!t.path("e.npy").exists(), "{what}: output written");
    }
}

/// all-MiniLM-L6-v2 against the numpy float64 batch (generate_batch.py).
mod real {
    use super::*;
    use serde_json::Value;
    use std::path::PathBuf;
    use wgpu_attention::model::resolve_model_path;

    const NEEDS: &str = "needs the fetched models: scripts/fetch-models.sh";

    fn minilm() -> BertModel {
        let path = resolve_model_path("minilm").unwrap_or_else(|e| panic!("{e}"));
        BertModel::load(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
    }

    fn fixture() -> (Vec<String>, Vec<Vec<u32>>, Array2<f32>) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/bert");
        let text = std::fs::read_to_string(dir.join("batch.json")).expect("batch.json");
        let cases: Vec<Value> = serde_json::from_str(&text).expect("batch.json parses");
        let texts = cases
            .iter()
            .map(|c| c["text"].as_str().expect("text").to_owned());
        let ids = cases.iter().map(|c| {
            c["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|i| i.as_u64().expect("id") as u32)
                .collect()
        });
        let want = read_npy(dir.join("batch_embeddings.npy")).expect("batch_embeddings.npy");
        (texts.collect(), ids.collect(), want)
    }

    /// The worst 1 - cos over the rows.
    fn worst_cosine_error(got: &Array2<f32>, want: &Array2<f32>) -> (usize, f64) {
        (0..got.nrows())
            .map(|i| (i, 1.0 - cosine(got.row(i), want.row(i))))
            .fold(
                (0, 0.0),
                |w, c| if c.1.is_nan() || c.1 > w.1 { c } else { w },
            )
    }

    #[test]
    #[ignore = "needs the fetched models: scripts/fetch-models.sh"]
    fn a_dozen_sentences_in_one_batch_match_numpy() {
        let model = minilm();
        assert_eq!(
            model.sentence_config().pooling,
            Pooling::MEAN_NORMALIZED,
            "{NEEDS}"
        );
        let (texts, ids, want) = fixture();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(
            model.tokenize_sentences(&refs).expect("ids"),
            ids,
            "tokenizer"
        );
        let got = embed(&model, &refs, 32);
        let (i, err) = worst_cosine_error(&got, &want);
        assert!(err < 1e-5, "sentence {i}: 1 - cos = {err:.2e}");
        assert_rows_close("gpu against numpy", &got, &want.mapv(f64::from), 2e-6);
        let cpu = model.embed_ids_reference(&ids).expect("reference embed");
        assert_rows_close(
            "float64 cpu against numpy",
            &cpu.mapv(|v| v as f32),
            &want.mapv(f64::from),
            1e-6,
        );
        let fast = model.embed_ids_cpu(&ids).expect("fast cpu embed");
        assert_rows_close(
            "fast f32 cpu against numpy",
            &fast.mapv(|v| v as f32),
            &want.mapv(f64::from),
            2e-6,
        );
        // Three lengths alone: the shortest, the longest and one between.
        for i in [1, 2, 7] {
            let alone = embed(&model, &refs[i..=i], 1);
            let row = got.row(i).mapv(f64::from).insert_axis(ndarray::Axis(0));
            assert_rows_close(&format!("sentence {i} alone"), &alone, &row, 1e-5);
        }
    }
}
