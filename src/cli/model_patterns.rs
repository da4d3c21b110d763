//! `model attention` with pattern flags (`--layers`, `--heads`, `--rows`, `--cols`,
//! `--pool`, `--entropy`): each layer's q and k from one GPU pass, then only what was asked
//! for, recomputed on the device by `attention_patterns` without the (L, L) matrices, so a
//! long text fits where every weight would not.

use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use ndarray::{Array3, Array4, Axis};
use wgpu_attention::model::{LayerInputs, Token};
use wgpu_attention::{attention_patterns, AttentionError, AttentionOptions, PatternOptions};

use super::args::{Backend, ModelArg, PatternArgs, TextArg};
use super::exit::CliError;
use super::io::output::OutputSet;
use super::io::stdout::out;
use super::model_common::{gpu, load, to_cli, tokens};
use super::npy;
use super::token_json;

/// What the pattern flags ask of each layer, checked against the model and the text.
struct Selection {
    layers: Vec<usize>,
    heads: Option<Vec<usize>>,
    rows: Range<usize>,
    cols: Range<usize>,
}

pub(super) fn patterns(
    model: &ModelArg,
    text: &TextArg,
    (out, tokens_out): (Option<&Path>, Option<&Path>),
    backend: Backend,
    args: &PatternArgs,
) -> Result<(), CliError> {
    if backend == Backend::Cpu {
        return Err(CliError::input(
            "--backend",
            "the pattern flags (--layers, --heads, --rows, --cols, --pool, --entropy) are \
             computed on the GPU; drop --backend cpu, or drop them for every weight",
        ));
    }
    if let Some(p) = args.pool {
        if p == 0 || p > wgpu_attention::MAX_POOL {
            return Err(CliError::input(
                "--pool",
                format!("must be 1 to {}, got {p}", wgpu_attention::MAX_POOL),
            ));
        }
    }
    // Claimed first: a colliding or unwritable output is bad input before any work.
    let mut files = OutputSet::new();
    let out_slot = out.map(|p| files.claim("--out", p)).transpose()?;
    let tokens_slot = tokens_out
        .map(|p| files.claim_text("--tokens-out", p))
        .transpose()?;
    let max_slot = args
        .pool_max_out
        .as_deref()
        .map(|p| files.claim("--pool-max-out", p))
        .transpose()?;
    let entropy_slot = args
        .entropy
        .as_deref()
        .map(|p| files.claim("--entropy", p))
        .transpose()?;

    let model = load(model)?;
    let tokens = tokens(&model, text)?;
    let info = model.info();
    let sel = select(args, (info.layers, info.heads), tokens.len())?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let ctx = gpu()?;
    let weights = model.upload(&ctx).map_err(to_cli)?;
    let start = Instant::now();
    let inputs = pollster::block_on(weights.attention_inputs(&ctx, &ids)).map_err(to_cli)?;
    let forward_s = start.elapsed().as_secs_f64();

    let opts = AttentionOptions {
        causal: info.causal,
        ..Default::default()
    };
    let ask = PatternOptions {
        heads: sel.heads.as_deref(),
        rows: Some(sel.rows.clone()),
        cols: Some(sel.cols.clone()),
        weights: out_slot.is_some() && args.pool.is_none(),
        pool: args.pool,
        entropy: entropy_slot.is_some(),
        column_sums: false,
    };
    let start = Instant::now();
    let mut main = Vec::new();
    let mut maxes = Vec::new();
    let mut entropies = Vec::new();
    let mut edges = None;
    let mut scratch = 0u64;
    for &layer in &sel.layers {
        let LayerInputs { q, k, .. } = inputs
            .get(layer)
            .ok_or_else(|| CliError::runtime(format!("the pass returned no layer {layer}")))?;
        let got = attention_patterns(&ctx, q.view(), k.view(), &opts, &ask)
            .map_err(|e| pattern_error(e, layer))?;
        scratch = scratch.max(got.scratch_bytes);
        if let Some(w) = got.weights {
            main.push(w.index_axis_move(Axis(0), 0));
        }
        if let Some(p) = got.pooled {
            main.push(cell_mass(&p.mean, &p.col_edges));
            maxes.push(p.max.index_axis_move(Axis(0), 0));
            edges = Some(p.col_edges);
        }
        if let Some(e) = got.entropy {
            let e = e.index_axis_move(Axis(0), 0);
            entropies.push(match &sel.heads {
                Some(h) => e.select(Axis(0), h),
                None => e,
            });
        }
    }
    let patterns_s = start.elapsed().as_secs_f64();

    let stacked = stack4(&main)?;
    if let (Some(slot), Some(a)) = (out_slot, &stacked) {
        npy::write(&mut files, slot, a)?;
    }
    if let Some(slot) = max_slot {
        let m = stack4(&maxes)?.ok_or_else(|| CliError::runtime("no pooled maxima"))?;
        npy::write(&mut files, slot, &m)?;
    }
    let entropy = stack3(&entropies)?;
    if let (Some(slot), Some(e)) = (entropy_slot, &entropy) {
        npy::write(&mut files, slot, e)?;
    }
    if let Some(slot) = tokens_slot {
        let json = match &edges {
            Some(edges) => cell_labels(&tokens, edges),
            None => token_json::to_json(&text.text, &tokens),
        };
        files.write(slot, |w| w.write_all(&json))?;
    }
    let to_stderr = files.uses_stdout();
    files.commit()?;
    let mut lines = Vec::new();
    if let (Some(path), Some(a)) = (out, &stacked) {
        let (l, h, r, c) = a.dim();
        let what = if args.pool.is_some() {
            "pooled attention (each cell's mass: mean over its rows of the sum over its columns)"
        } else {
            "attention probabilities"
        };
        lines.push(format!(
            "{}: float32 ({l}, {h}, {r}, {c}) {what} of {} tokens",
            path.display(),
            tokens.len()
        ));
    }
    if let (Some(path), Some(e)) = (args.entropy.as_deref(), &entropy) {
        let (l, h, r) = e.dim();
        lines.push(format!(
            "{}: float32 ({l}, {h}, {r}) entropy of each row (nats)",
            path.display()
        ));
    }
    for line in lines {
        if to_stderr {
            eprintln!("{line}");
        } else {
            out!("{line}");
        }
    }
    eprintln!(
        "Gpu: forward {:.1} ms, patterns {:.1} ms over {} layers, device scratch {} bytes per layer",
        forward_s * 1e3,
        patterns_s * 1e3,
        sel.layers.len(),
        scratch
    );
    Ok(())
}

/// Checks the flags against the model's `(layers, heads)` and the text's `len` tokens.
fn select(
    args: &PatternArgs,
    (layers, heads): (usize, usize),
    len: usize,
) -> Result<Selection, CliError> {
    let check = |flag: &'static str, what: &str, list: &[usize], n: usize| match list
        .iter()
        .find(|&&i| i >= n)
    {
        Some(i) => Err(CliError::input(
            flag,
            format!(
                "{what} {i} is out of range: the model has {n} (0 to {})",
                n - 1
            ),
        )),
        None => Ok(()),
    };
    if let Some(l) = &args.layers {
        check("--layers", "layer", &l.0, layers)?;
    }
    if let Some(h) = &args.heads {
        check("--heads", "head", &h.0, heads)?;
    }
    let span = |flag: &'static str, r: &Option<Range<usize>>| match r {
        Some(r) if r.end > len => Err(CliError::input(
            flag,
            format!(
                "{}..{} reaches past the text's {len} tokens",
                r.start, r.end
            ),
        )),
        Some(r) => Ok(r.clone()),
        None => Ok(0..len),
    };
    Ok(Selection {
        layers: args
            .layers
            .as_ref()
            .map_or_else(|| (0..layers).collect(), |l| l.0.clone()),
        heads: args.heads.as_ref().map(|h| h.0.clone()),
        rows: span("--rows", &args.rows)?,
        cols: span("--cols", &args.cols)?,
    })
}

/// A library error of layer `layer` as the command line reports it: a request the device
/// cannot hold names the flag that shrinks it.
fn pattern_error(e: AttentionError, layer: usize) -> CliError {
    let flag = match &e {
        AttentionError::InvalidOption { arg, .. }
        | AttentionError::Shape { arg, .. }
        | AttentionError::TooLarge { arg, .. } => match *arg {
            "heads" => Some("--heads"),
            "rows" => Some("--rows"),
            "cols" => Some("--cols"),
            "pool" => Some("--pool"),
            "weights" => Some("--pool"),
            _ => None,
        },
        _ => None,
    };
    match flag {
        Some(flag) if e.is_input_error() => CliError::input(flag, format!("layer {layer}: {e}")),
        _ => CliError::runtime(format!("attention patterns of layer {layer}: {e}")),
    }
}

/// Pooled means `(1, heads, P, Q)` as each cell's attention mass: the mean over its rows
/// of the weights summed over its columns (mean × the cell's column count), so a row of
/// cells sums to what its rows gave the window's columns. `col_edges` are absolute; only
/// their differences count.
fn cell_mass(mean: &Array4<f32>, col_edges: &[usize]) -> Array3<f32> {
    let mut m = mean.index_axis(Axis(0), 0).to_owned();
    for (c, mut col) in m.axis_iter_mut(Axis(2)).enumerate() {
        let width = col_edges
            .get(c + 1)
            .zip(col_edges.get(c))
            .map_or(0, |(b, a)| b - a);
        col.mapv_inplace(|x| x * width as f32);
    }
    m
}

fn stack4(parts: &[Array3<f32>]) -> Result<Option<Array4<f32>>, CliError> {
    if parts.is_empty() {
        return Ok(None);
    }
    let views: Vec<_> = parts.iter().map(|a| a.view()).collect();
    ndarray::stack(Axis(0), &views)
        .map(Some)
        .map_err(|e| CliError::runtime(format!("stacking the layers: {e}")))
}

fn stack3(parts: &[ndarray::Array2<f32>]) -> Result<Option<Array3<f32>>, CliError> {
    if parts.is_empty() {
        return Ok(None);
    }
    let views: Vec<_> = parts.iter().map(|a| a.view()).collect();
    ndarray::stack(Axis(0), &views)
        .map(Some)
        .map_err(|e| CliError::runtime(format!("stacking the layers: {e}")))
}

/// One label per pooled column (the keys'; the rows' too for a square window): its token
/// range and first token, as a JSON list of strings. `edges` are absolute positions.
fn cell_labels(tokens: &[Token], edges: &[usize]) -> Vec<u8> {
    let labels: Vec<String> = edges
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let head = tokens.get(a).map_or("", |t| t.text.as_str());
            if b - a == 1 {
                format!("{a} {head}")
            } else {
                format!("{a}-{} {head}…", b - 1)
            }
        })
        .collect();
    // A list of strings cannot fail to encode.
    serde_json::to_vec(&labels).unwrap_or_default()
}
