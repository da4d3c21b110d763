//! `wgpu-attention heatmap`: attention weights drawn as SVG or PNG, one matrix or a grid of
//! small multiples, from a weights `.npy` (of `run --weights`, `mha --attn-weights` or
//! `model attention`), or the difference of two such tensors (`--diff`) on a diverging
//! scale.

use std::io::Read;
use std::path::Path;

use ndarray::{ArrayD, ArrayView2, Axis, Ix2};
use wgpu_attention::viz::{
    check_probability_rows, grid_order, head_stats, word_attention, Grid, GridOrder, Heatmap,
};

use super::args::{GridOrderArg, HeatmapArgs, ModelArg, TextArg};
use super::exit::CliError;
use super::io::output::OutputSet;
use super::io::read::open_input;
use super::model_common::attention_of;
use super::npy;
use super::raster;
use super::token_json::{self, TokenLabels};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

fn format_of(path: &Path) -> Result<Format, CliError> {
    // Standard output gets SVG, which is text.
    if path.as_os_str() == "-" {
        return Ok(Format::Svg);
    }
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
    {
        Some(e) if e == "svg" => Ok(Format::Svg),
        Some(e) if e == "png" => Ok(Format::Png),
        other => Err(CliError::input(
            "--out",
            format!(
                "unknown extension {}: use .svg or .png",
                other.map_or("(none)".to_string(), |e| format!(".{e}"))
            ),
        )),
    }
}

pub fn run(args: &HeatmapArgs) -> Result<(), CliError> {
    let format = format_of(&args.out)?;
    // Claimed before any work: an uncreatable path is bad input, and nothing partial
    // ever appears at it.
    let mut files = OutputSet::new();
    let slot = match format {
        Format::Svg => files.claim_text("--out", &args.out)?,
        Format::Png => files.claim("--out", &args.out)?,
    };
    if args.group == 0 {
        return Err(CliError::input("--group", "must be at least 1"));
    }
    check_order_flags(args)?;
    if let Some(cell) = args.cell {
        if !(cell.is_finite() && (2.0..=400.0).contains(&cell)) {
            return Err(CliError::input(
                "--cell",
                format!("{cell} is not between 2 and 400 pixels"),
            ));
        }
    }
    let (weights, labels) = match (&args.weights, &args.model) {
        (Some(path), _) => (npy::read_floats("--weights", path)?, key_labels(args)?),
        (None, Some(model)) => {
            let text = args.text.clone().unwrap_or_default();
            let (probs, tokens) = attention_of(
                &ModelArg {
                    model: model.clone(),
                },
                &TextArg { text: text.clone() },
                args.backend,
            )?;
            (
                probs.into_dyn(),
                Some(TokenLabels::of_tokens(&text, &tokens)),
            )
        }
        (None, None) => return Err(CliError::input("--weights", "give --weights or --model")),
    };
    let diff = match &args.diff {
        Some(path) => {
            let b = npy::read_floats("--diff", path)?;
            if b.shape() != weights.shape() {
                return Err(CliError::input(
                    "--diff",
                    format!(
                        "{} has shape {:?} but --weights has shape {:?}: a difference needs equal shapes",
                        path.display(),
                        b.shape(),
                        weights.shape()
                    ),
                ));
            }
            Some(b)
        }
        None => None,
    };
    // The sentence the title names: as typed, or its words, or the labels given.
    let sentence = match (&args.text, &labels) {
        (Some(text), _) => text.clone(),
        (None, Some(TokenLabels { words: Some(w), .. })) => w
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        (None, Some(l)) => l.labels.join(" "),
        (None, None) => String::new(),
    };
    let (weights, diff, key_labels) = if args.words {
        let diff = match diff {
            Some(b) => Some(to_words(args, "--diff", &b, labels.clone())?.0),
            None => None,
        };
        let (w, l) = to_words(args, "--weights", &weights, labels)?;
        (w, diff, l)
    } else {
        (weights, diff, labels.map(|l| l.labels))
    };
    let query_labels = split_labels(args.query_labels.as_deref());
    let svg = if args.grid {
        grid_svg(
            args,
            &weights,
            diff.as_ref(),
            key_labels.unwrap_or_default(),
            &sentence,
        )?
    } else {
        single_svg(
            args,
            &weights,
            diff.as_ref(),
            (key_labels, query_labels),
            &sentence,
        )?
    };
    let bytes = match format {
        Format::Svg => svg.into_bytes(),
        Format::Png => raster::svg_to_png(&svg).map_err(CliError::runtime)?,
    };
    files.write(slot, |w| w.write_all(&bytes))?;
    files.commit()
}

/// `--order` and `--annotate` lay out and label a grid of attention weights: they need
/// `--grid`, no `--diff` (a difference has no entropy), and `--order` other than `layer`
/// moves heads out of their `--group` boxes.
fn check_order_flags(args: &HeatmapArgs) -> Result<(), CliError> {
    let order_name = args.order.map(|o| match o {
        GridOrderArg::Layer => "layer",
        GridOrderArg::Entropy => "entropy",
        GridOrderArg::Similarity => "similarity",
    });
    for (flag, given) in [
        ("--order", args.order.is_some()),
        ("--annotate", args.annotate),
    ] {
        if !given {
            continue;
        }
        if !args.grid {
            return Err(CliError::input(
                flag,
                "applies to the small multiples of --grid: give --grid",
            ));
        }
        if args.diff.is_some() {
            return Err(CliError::input(
                flag,
                "needs attention weights, and --diff draws their difference, which has no entropy",
            ));
        }
    }
    if args.group > 1 {
        if let Some(name) = order_name.filter(|&n| n != "layer") {
            return Err(CliError::input(
                "--order",
                format!(
                    "{name} moves heads out of their --group boxes: box them with --order layer"
                ),
            ));
        }
    }
    Ok(())
}

fn grid_order_of(arg: Option<GridOrderArg>) -> GridOrder {
    match arg {
        None | Some(GridOrderArg::Layer) => GridOrder::Layer,
        Some(GridOrderArg::Entropy) => GridOrder::Entropy,
        Some(GridOrderArg::Similarity) => GridOrder::Similarity,
    }
}

fn split_labels(s: Option<&str>) -> Option<Vec<String>> {
    s.map(|s| s.split(',').map(str::to_string).collect())
}

fn key_labels(args: &HeatmapArgs) -> Result<Option<TokenLabels>, CliError> {
    if let Some(s) = &args.labels {
        return Ok(split_labels(Some(s)).map(TokenLabels::plain));
    }
    let Some(path) = &args.tokens else {
        return Ok(None);
    };
    let text = read_small_text("--tokens", path)?;
    let tokens = token_json::parse(&text).map_err(|e| {
        CliError::input(
            "--tokens",
            format!("{}: not a token list: {e}", path.display()),
        )
    })?;
    Ok(Some(tokens))
}

/// The weights and labels of the word view: every matrix of `weights` aggregated over
/// the words of `labels` (see [`word_attention`]).
fn to_words(
    args: &HeatmapArgs,
    flag: &'static str,
    weights: &ArrayD<f32>,
    labels: Option<TokenLabels>,
) -> Result<(ArrayD<f32>, Option<Vec<String>>), CliError> {
    let Some(words) = labels.and_then(|l| l.words) else {
        return Err(CliError::input(
            "--words",
            "needs the tokens' words: give --model and --text, or --tokens with a list from `model attention --tokens-out`",
        ));
    };
    check_rank(weights)?;
    let shape = weights.shape().to_vec();
    let (lq, lk) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let n = words.last().map_or(0, |(_, r)| r.end);
    if lq != n || lk != n {
        let flag = if args.tokens.is_some() {
            "--tokens"
        } else {
            "--words"
        };
        return Err(CliError::input(
            flag,
            format!("{n} tokens for weights of {lq} queries and {lk} keys"),
        ));
    }
    let ranges: Vec<_> = words.iter().map(|(_, r)| r.clone()).collect();
    let lead: Vec<usize> = shape[..shape.len() - 2].to_vec();
    let count: usize = lead.iter().product();
    let flat = weights
        .to_shape((count, lq, lk))
        .map_err(|e| CliError::runtime(format!("reshaping the weights: {e}")))?;
    let mut out = Vec::with_capacity(count * ranges.len() * ranges.len());
    for (m, matrix) in flat.outer_iter().enumerate() {
        probability(matrix, flag, &format!("matrix {m}: "))?;
        let w =
            word_attention(matrix, &ranges, &ranges).map_err(|e| CliError::input("--tokens", e))?;
        out.extend(w.iter().copied());
    }
    let mut dims = lead;
    dims.extend([ranges.len(), ranges.len()]);
    let aggregated = ArrayD::from_shape_vec(dims, out)
        .map_err(|e| CliError::runtime(format!("shaping the word view: {e}")))?;
    Ok((
        aggregated,
        Some(words.into_iter().map(|(t, _)| t).collect()),
    ))
}

/// Token files are small; anything past this is not one.
const MAX_TOKENS_FILE: u64 = 16 << 20;

fn read_small_text(flag: &'static str, path: &Path) -> Result<String, CliError> {
    let fail = |e: &dyn std::fmt::Display| {
        CliError::input(flag, format!("cannot read {}: {e}", path.display()))
    };
    let (file, len) = open_input(flag, path)?;
    if len > MAX_TOKENS_FILE {
        return Err(fail(&format!("{len} bytes is too large for a token list")));
    }
    let mut text = String::new();
    file.take(MAX_TOKENS_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(&e))?;
    if text.len() as u64 > MAX_TOKENS_FILE {
        return Err(fail(&"the file grew past the limit for a token list"));
    }
    Ok(text)
}

/// Picks index `want` of `axis` of `a`, or the only one, or says which flag is missing.
fn pick(
    a: ArrayD<f32>,
    want: Option<usize>,
    flag: &'static str,
    what: &str,
) -> Result<(ArrayD<f32>, usize), CliError> {
    let n = a.shape()[0];
    let i = match want {
        Some(i) if i < n => i,
        Some(i) => {
            return Err(CliError::input(
                flag,
                format!("{what} {i} is out of range: the weights have {n}"),
            ))
        }
        None if n == 1 => 0,
        None => {
            return Err(CliError::input(
                flag,
                format!("the weights have {n} {what}s: choose one (or --grid)"),
            ))
        }
    };
    Ok((a.index_axis(Axis(0), i).to_owned(), i))
}

fn refuse(flag: &'static str, given: Option<usize>, rank: usize) -> Result<(), CliError> {
    match given {
        Some(_) => Err(CliError::input(
            flag,
            format!("the weights have rank {rank}: no such axis"),
        )),
        None => Ok(()),
    }
}

fn check_rank(weights: &ArrayD<f32>) -> Result<(), CliError> {
    let rank = weights.ndim();
    if !(2..=4).contains(&rank) {
        return Err(CliError::input(
            "--weights",
            format!(
                "expected rank 2 to 4 (…, Lq, Lk), got shape {:?}",
                weights.shape()
            ),
        ));
    }
    if weights.shape().contains(&0) {
        return Err(CliError::input(
            "--weights",
            format!("shape {:?} is empty", weights.shape()),
        ));
    }
    Ok(())
}

fn as_matrix(a: &ArrayD<f32>) -> ArrayView2<'_, f32> {
    a.view().into_dimensionality::<Ix2>().expect("rank checked")
}

fn probability(m: ArrayView2<f32>, flag: &'static str, place: &str) -> Result<(), CliError> {
    check_probability_rows(m).map_err(|e| CliError::input(flag, format!("{place}{e}")))
}

/// The range of the diverging scale for the differences `d`: their largest magnitude, or
/// 1 (the largest a difference of probabilities can be) when they are all 0.
fn range_of(d: &ArrayD<f32>) -> f32 {
    let r = d.iter().fold(0.0f32, |m, &x| m.max(x.abs()));
    if r > 0.0 {
        r
    } else {
        1.0
    }
}

/// What the title of a difference says: the two files, and the scale's range.
fn diff_title(args: &HeatmapArgs, d: &ArrayD<f32>) -> (String, String) {
    let name = |p: &Option<std::path::PathBuf>| {
        p.as_deref()
            .and_then(Path::file_name)
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    };
    let files = format!("{} − {}", name(&args.weights), name(&args.diff));
    let max = d.iter().fold(0.0f32, |m, &x| m.max(x.abs()));
    let range = if max == 0.0 {
        "identical".to_string()
    } else if max >= 0.05 {
        format!("scale ±max |A − B| = ±{max:.3}")
    } else {
        format!("scale ±max |A − B| = ±{max:.2e}")
    };
    (files, range)
}

/// The matrix `--layer` and `--head` pick from `weights`, and the names of the picks.
fn select(
    args: &HeatmapArgs,
    weights: &ArrayD<f32>,
) -> Result<(ArrayD<f32>, Vec<String>), CliError> {
    check_rank(weights)?;
    let rank = weights.ndim();
    let mut m = weights.clone();
    let mut names = Vec::new();
    if rank == 4 {
        let (rest, l) = pick(m, args.layer, "--layer", "layer")?;
        m = rest;
        names.push(format!("layer {l}"));
    } else {
        refuse("--layer", args.layer, rank)?;
    }
    if rank >= 3 {
        let (rest, h) = pick(m, args.head, "--head", "head")?;
        m = rest;
        names.push(format!("head {h}"));
    } else {
        refuse("--head", args.head, rank)?;
    }
    Ok((m, names))
}

fn single_svg(
    args: &HeatmapArgs,
    weights: &ArrayD<f32>,
    diff: Option<&ArrayD<f32>>,
    (key_labels, query_labels): (Option<Vec<String>>, Option<Vec<String>>),
    sentence: &str,
) -> Result<String, CliError> {
    let (m, names) = select(args, weights)?;
    probability(as_matrix(&m), "--weights", &place(&names))?;
    let (m, difference) = match diff {
        Some(b) => {
            let (mb, _) = select(args, b)?;
            probability(as_matrix(&mb), "--diff", &place(&names))?;
            let d = &m - &mb;
            let range = range_of(&d);
            (d, Some(range))
        }
        None => (m, None),
    };
    let matrix = as_matrix(&m);
    let (lq, lk) = matrix.dim();
    let keys = key_labels.unwrap_or_default();
    if !keys.is_empty() && keys.len() != lk {
        let flag = if args.tokens.is_some() {
            "--tokens"
        } else {
            "--labels"
        };
        return Err(CliError::input(
            flag,
            format!("{} labels for {lk} keys", keys.len()),
        ));
    }
    let queries = match query_labels {
        Some(q) if q.len() != lq => {
            return Err(CliError::input(
                "--query-labels",
                format!("{} labels for {lq} queries", q.len()),
            ))
        }
        Some(q) => q,
        None if keys.is_empty() || lq == lk => keys.clone(),
        None => {
            let flag = if args.tokens.is_some() {
                "--tokens"
            } else {
                "--labels"
            };
            return Err(CliError::input(
                flag,
                format!("{lq} queries but {lk} keys: give the queries' labels with --query-labels"),
            ));
        }
    };
    let mut h = Heatmap::new(matrix);
    // Name the sentence as typed (or its words), not its pieces.
    h.title = args.title.clone().unwrap_or_else(|| match difference {
        Some(_) => {
            let (files, range) = diff_title(args, &m);
            let mut parts = vec![files];
            parts.extend(names.iter().cloned());
            parts.push(range);
            default_title(&parts, words_note(args), sentence)
        }
        None => default_title(&names, words_note(args), sentence),
    });
    h.difference = difference;
    h.row_labels = queries;
    h.col_labels = keys;
    h.values = args.values;
    // Differences under 0.05 print as "+1.2e−7", which needs a wider cell.
    let wide_values = difference.is_some_and(|r| r < 0.05);
    h.cell = args.cell.unwrap_or(match (args.values, wide_values) {
        (true, true) => 64.0,
        (true, false) => 48.0,
        (false, _) => 32.0,
    });
    Ok(h.svg())
}

/// What a grid's title adds when its heads are reordered.
fn order_note(order: GridOrder) -> &'static str {
    match order {
        GridOrder::Layer => "",
        GridOrder::Entropy => " · by entropy",
        GridOrder::Similarity => " · by similarity",
    }
}

/// What the title adds in the word view.
fn words_note(args: &HeatmapArgs) -> &'static str {
    if args.words {
        " · words"
    } else {
        ""
    }
}

fn place(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("{}: ", names.join(", "))
    }
}

/// The most characters of the sentence a default title quotes: a long text (or the labels
/// of a pooled map) would make the figure as wide as the text.
const TITLE_SENTENCE_CHARS: usize = 80;

/// `text` cut to `max` characters, the cut marked with an ellipsis.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn default_title(names: &[String], note: &str, sentence: &str) -> String {
    let mut parts = names.to_vec();
    if !note.is_empty() {
        parts.push(note.trim_start_matches(" · ").to_string());
    }
    if !sentence.is_empty() {
        parts.push(format!("“{}”", shortened(sentence, TITLE_SENTENCE_CHARS)));
    }
    if parts.is_empty() {
        "attention weights".to_string()
    } else {
        parts.join(" · ")
    }
}

/// The page a grid fills (pixels), and the largest cell it draws by default.
const GRID_PAGE: (f64, f64) = (1400.0, 900.0);
const GRID_MAX_CELL: f64 = 24.0;

/// `weights` as (layers, heads, Lq, Lk), with one layer where the tensor has none, and
/// the layers' caption prefixes.
fn as_layers(
    args: &HeatmapArgs,
    weights: &ArrayD<f32>,
) -> Result<(ArrayD<f32>, Vec<String>), CliError> {
    check_rank(weights)?;
    let rank = weights.ndim();
    // As (layers, heads, Lq, Lk), with one layer where the tensor has none.
    let (w4, layer_names): (ArrayD<f32>, Vec<String>) = match rank {
        2 => {
            return Err(CliError::input(
                "--grid",
                "the weights are one matrix (rank 2): nothing to grid",
            ))
        }
        3 => {
            refuse("--layer", args.layer, rank)?;
            (weights.clone().insert_axis(Axis(0)), vec![String::new()])
        }
        _ => match args.layer {
            Some(l) => {
                let (rest, l) = pick(weights.clone(), Some(l), "--layer", "layer")?;
                (rest.insert_axis(Axis(0)), vec![format!("L{l} ")])
            }
            None => {
                let n = weights.shape()[0];
                (weights.clone(), (0..n).map(|l| format!("L{l} ")).collect())
            }
        },
    };
    Ok((w4, layer_names))
}

/// Checks that every matrix of the (layers, heads, Lq, Lk) tensor `w4` is attention.
fn check_layers(
    w4: &ArrayD<f32>,
    layer_names: &[String],
    flag: &'static str,
) -> Result<(), CliError> {
    for (l, layer_name) in layer_names.iter().enumerate() {
        for h in 0..w4.shape()[1] {
            let m = w4
                .slice(ndarray::s![l, h, .., ..])
                .into_dimensionality::<Ix2>()
                .expect("rank checked");
            probability(m, flag, &format!("{layer_name}head {h}: "))?;
        }
    }
    Ok(())
}

fn grid_svg(
    args: &HeatmapArgs,
    weights: &ArrayD<f32>,
    diff: Option<&ArrayD<f32>>,
    labels: Vec<String>,
    sentence: &str,
) -> Result<String, CliError> {
    let (w4, layer_names) = as_layers(args, weights)?;
    check_layers(&w4, &layer_names, "--weights")?;
    let (w4, difference) = match diff {
        Some(b) => {
            let (b4, _) = as_layers(args, b)?;
            check_layers(&b4, &layer_names, "--diff")?;
            let d = &w4 - &b4;
            let range = range_of(&d);
            (d, Some(range))
        }
        None => (w4, None),
    };
    let heads = w4.shape()[1];
    let caption = |l: usize, h: usize| format!("{}H{h}", layer_names[l]);
    let order = grid_order_of(args.order);
    // Heads in the order drawn, and the notes under them.
    let (placed, notes): (Vec<(usize, usize)>, Vec<Vec<String>>) =
        if order == GridOrder::Layer && !args.annotate {
            let all = (0..layer_names.len())
                .flat_map(|l| (0..heads).map(move |h| (l, h)))
                .collect();
            (all, Vec::new())
        } else {
            let flag = if order == GridOrder::Layer {
                "--annotate"
            } else {
                "--order"
            };
            let stats = head_stats(w4.view()).map_err(|e| CliError::input(flag, e.to_string()))?;
            let placed = grid_order(&stats, order);
            let notes = if args.annotate {
                placed
                    .iter()
                    .map(|&(l, h)| {
                        let st = stats.get(l, h).expect("a head of the stats");
                        let mut lines = vec![format!("{:.3} nats", st.entropy)];
                        if order == GridOrder::Similarity {
                            if let Some(n) = st.nearest {
                                lines.push(format!(
                                    "≈ {} · {:.3}",
                                    caption(n.layer, n.head),
                                    n.distance
                                ));
                            }
                        }
                        lines
                    })
                    .collect()
            } else {
                Vec::new()
            };
            (placed, notes)
        };
    let mut panels = Vec::new();
    for &(l, h) in &placed {
        let m = w4
            .slice(ndarray::s![l, h, .., ..])
            .into_dimensionality::<Ix2>()
            .expect("rank checked");
        panels.push((caption(l, h), m));
    }
    let sentence = if sentence.is_empty() {
        String::new()
    } else {
        format!(" · “{sentence}”")
    };
    let title = args.title.clone().unwrap_or_else(|| {
        let what = if layer_names.len() == 1 && !layer_names[0].is_empty() {
            format!(
                "every head of layer {}",
                layer_names[0].trim().trim_start_matches('L')
            )
        } else if layer_names.len() == 1 {
            "every head".to_string()
        } else {
            format!("every layer × head ({} × {heads})", layer_names.len())
        };
        match difference {
            Some(_) => {
                let (files, range) = diff_title(args, &w4);
                format!("{files} · {what} · {range}{}{sentence}", words_note(args))
            }
            None => format!("{what}{}{}{sentence}", order_note(order), words_note(args)),
        }
    });
    let (lq, lk) = (w4.shape()[2], w4.shape()[3]);
    let mut grid = Grid::new(title, panels, heads);
    grid.group = args.group;
    grid.difference = difference;
    grid.notes = notes;
    if lq == lk && labels.len() == lk {
        grid.row_labels = labels.clone();
        grid.col_labels = labels;
    }
    if layer_names.len() == 1 {
        // One layer's heads: as many columns as fill the page best.
        grid.fit(GRID_PAGE.0, GRID_PAGE.1, args.cell.unwrap_or(GRID_MAX_CELL));
        if let Some(cell) = args.cell {
            grid.cell = cell;
        }
    } else {
        // The model view keeps one row per layer; its cells fill the page's width.
        grid.cell = args
            .cell
            .unwrap_or_else(|| model_view_cell(&grid, GRID_PAGE.0));
    }
    Ok(grid.svg())
}

/// The cell with which one row of `grid`'s heads fills `width`.
fn model_view_cell(grid: &Grid, width: f64) -> f64 {
    let mut probe = grid.clone();
    probe.title.clear();
    let mut lo = 1.0f64;
    let mut hi = GRID_MAX_CELL;
    for _ in 0..30 {
        let mid = (lo + hi) / 2.0;
        probe.cell = mid;
        if probe.size().0 <= width {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_sentence_is_cut_in_the_default_title() {
        let long = "word ".repeat(500);
        let title = default_title(&["layer 0".into()], "", &long);
        assert!(title.chars().count() < 100, "{title}");
        assert!(title.ends_with("…”"), "{title}");
        let short = default_title(&[], "", "The cat sat on the mat");
        assert_eq!(short, "“The cat sat on the mat”");
        // Cut by characters, never inside one (Korean is 3 bytes a character).
        let korean = "고양이가 매트 위에 앉았다 ".repeat(20);
        assert_eq!(shortened(&korean, 10).chars().count(), 10);
    }
}
