//! `wgpu-attention model embed` and `model similarity`: sentence embeddings of a BERT
//! sentence-transformers model (all-MiniLM-L6-v2), pooled as its modules.json and pooling
//! config say, batched through key padding on the GPU or one by one on the fast f32 CPU
//! path. Every sentence is checked before a device opens; `--out` is claimed before any
//! work and appears only once every embedding is computed.

use super::io::stdout::out;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use ndarray::Array2;
use wgpu_attention::model::bert::{BertModel, PoolingMode};
use wgpu_attention::model::{Model, ModelError, ModelGpu};

use super::args::{Backend, EmbedArgs, SimilarityArgs};
use super::exit::CliError;
use super::io::output::OutputSet;
use super::io::read::open_input;
use super::model_common::{gpu, load, to_cli};
use super::npy;

/// A sentence file far larger than this is a mistake (a model file, a device).
const INPUT_LIMIT: u64 = 64 << 20;

/// The model as a BERT, or exit 2 naming `--model`.
fn bert(model: &Model) -> Result<&BertModel, CliError> {
    match model {
        Model::Bert(b) => Ok(b),
        Model::Llama(_) => Err(CliError::input(
            "--model",
            "sentence embeddings need a BERT sentence-transformers model (e.g. minilm), not a causal decoder",
        )),
    }
}

/// Reads a sentence file: a regular UTF-8 file of at most [`INPUT_LIMIT`] bytes, one
/// sentence a line (`\n` or `\r\n`); a blank line is refused rather than skipped, so
/// that row i of the output is always line i + 1.
fn read_sentences(path: &Path) -> Result<Vec<String>, CliError> {
    let shown = path.display();
    let fail = |msg: String| CliError::input("--input", format!("{shown}: {msg}"));
    let (file, len) = open_input("--input", path)?;
    if len > INPUT_LIMIT {
        return Err(fail(format!("larger than {INPUT_LIMIT} bytes")));
    }
    let mut bytes = Vec::new();
    file.take(INPUT_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > INPUT_LIMIT {
        return Err(fail(format!("larger than {INPUT_LIMIT} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8: {e}")))?;
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.is_empty() {
        return Err(fail("no sentences (the file is empty)".into()));
    }
    if let Some(n) = lines.iter().position(|l| l.trim().is_empty()) {
        return Err(fail(format!(
            "line {} is blank; give one sentence a line",
            n + 1
        )));
    }
    Ok(lines)
}

/// Every sentence's ids, each refusal naming its flag and which sentence or line.
fn sentence_ids(
    model: &BertModel,
    sentences: &[String],
    from_file: bool,
) -> Result<Vec<Vec<u32>>, CliError> {
    let (flag, what) = if from_file {
        ("--input", "line")
    } else {
        ("--text", "sentence")
    };
    sentences
        .iter()
        .enumerate()
        .map(|(i, s)| {
            model.sentence_ids(s).map_err(|e| match e {
                ModelError::Input { detail, .. } => {
                    CliError::input(flag, format!("{what} {}: {detail}", i + 1))
                }
                other => to_cli(other),
            })
        })
        .collect()
}

/// The embeddings of `ids` on `backend`, with the seconds the forward passes took.
fn embeddings(
    model: &Model,
    ids: &[Vec<u32>],
    batch: usize,
    backend: Backend,
) -> Result<(Array2<f32>, f64), CliError> {
    let b = bert(model)?;
    let to_flag = |e: ModelError| match e {
        ModelError::Input {
            arg: "batch",
            detail,
        } => CliError::input("--batch", detail),
        other => to_cli(other),
    };
    match backend {
        Backend::Cpu => {
            let start = Instant::now();
            let e = b.embed_ids_cpu(ids).map_err(to_flag)?;
            Ok((e.mapv(|v| v as f32), start.elapsed().as_secs_f64()))
        }
        Backend::Gpu => {
            let ctx = gpu()?;
            let ModelGpu::Bert(weights) = model.upload(&ctx).map_err(to_cli)? else {
                return Err(CliError::runtime("a BERT model uploaded as another family"));
            };
            let pooling = b.sentence_config().pooling;
            let start = Instant::now();
            let run = weights.embed_ids(&ctx, ids, pooling, batch);
            let e = pollster::block_on(run).map_err(to_flag)?;
            Ok((e, start.elapsed().as_secs_f64()))
        }
    }
}

fn pooling_name(model: &BertModel) -> String {
    let p = model.sentence_config().pooling;
    let mode = match p.mode {
        PoolingMode::Mean => "mean",
        PoolingMode::Cls => "CLS",
        PoolingMode::Max => "max",
        PoolingMode::MeanSqrtLen => "mean-sqrt-len",
    };
    format!(
        "{mode} pooling{}",
        if p.normalize { ", L2-normalised" } else { "" }
    )
}

pub fn embed(args: &EmbedArgs) -> Result<(), CliError> {
    if args.batch == 0 {
        return Err(CliError::input("--batch", "must be at least 1 sentence"));
    }
    let mut files = OutputSet::new();
    let slot = files.claim("--out", &args.out)?;
    let sentences = match &args.input {
        Some(path) => read_sentences(path)?,
        None => args.text.clone(),
    };
    if sentences.is_empty() {
        return Err(CliError::input("--text", "no sentences to embed"));
    }
    let model = load(&args.model)?;
    let b = bert(&model)?;
    let ids = sentence_ids(b, &sentences, args.input.is_some())?;
    let (e, seconds) = embeddings(&model, &ids, args.batch, args.backend)?;
    npy::write(&mut files, slot, &e)?;
    files.commit()?;
    let (n, h) = e.dim();
    out!(
        "{}: float32 ({n}, {h}) sentence embeddings ({})",
        args.out.display(),
        pooling_name(b)
    );
    eprintln!(
        "{:?}: {n} sentences in {:.1} ms ({:.2} ms per sentence, batch {})",
        args.backend,
        seconds * 1e3,
        seconds * 1e3 / n as f64,
        args.batch
    );
    Ok(())
}

/// cos(a, b) in f64.
fn cosine(a: ndarray::ArrayView1<'_, f32>, b: ndarray::ArrayView1<'_, f32>) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let norm = |v: ndarray::ArrayView1<'_, f32>| {
        v.iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
    };
    dot / (norm(a) * norm(b)).max(1e-300)
}

pub fn similarity(args: &SimilarityArgs) -> Result<(), CliError> {
    if args.text.len() != 2 {
        return Err(CliError::input(
            "--text",
            format!(
                "give exactly two sentences (--text A --text B), got {}",
                args.text.len()
            ),
        ));
    }
    let model = load(&args.model)?;
    let ids = sentence_ids(bert(&model)?, &args.text, false)?;
    let (e, _) = embeddings(&model, &ids, 2, args.backend)?;
    out!("{:.6}", cosine(e.row(0), e.row(1)));
    Ok(())
}
