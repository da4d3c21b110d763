//! A long text in the lab: the chosen layer and head of the loaded model pooled into a map
//! of at most P × P cells by `attention_patterns` (no L × L matrix on the device), every
//! row's entropy, and a clicked cell's region recomputed exactly, each against the float64
//! `patterns_reference` of the same q and k, with the device memory the view took.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use ndarray::{s, Array2, Axis};
use serde_json::{json, Value};
use wgpu_attention::model::{LayerInputs, ModelError, Token};
use wgpu_attention::viz::Heatmap;
use wgpu_attention::{
    attention_patterns_async, patterns_reference, AttentionOptions, AttentionPatterns,
    PatternOptions,
};

use crate::{gpu, matrix_json, max_diff, now, Loaded};

/// The most tokens a pasted text may have here.
const MAX_TOKENS: usize = 4096;

/// A long text's layer inputs, kept while only the layer, head, pool or zoom change.
struct LongPass {
    key: (usize, String),
    tokens: Vec<Token>,
    inputs: Vec<LayerInputs>,
    forward_ms: f64,
}

thread_local! {
    static LONG: RefCell<Option<Rc<LongPass>>> = const { RefCell::new(None) };
}

fn err(e: ModelError) -> String {
    e.to_string()
}

/// One label per cell: its token range and first token.
fn cell_labels(tokens: &[Token], edges: &[usize]) -> Vec<String> {
    edges
        .windows(2)
        .map(|w| {
            let head = tokens.get(w[0]).map_or("", |t| t.text.as_str());
            if w[1] - w[0] == 1 {
                format!("{} {head}", w[0])
            } else {
                format!("{}-{} {head}…", w[0], w[1] - 1)
            }
        })
        .collect()
}

/// Each cell's attention mass (mean over its rows of the sum over its columns) of head 0 of
/// a pooled result, so rows sum to 1 as in `model attention --pool`.
fn mass(p: &AttentionPatterns) -> Result<(Array2<f32>, Vec<usize>, Vec<usize>), String> {
    let pooled = p.pooled.as_ref().ok_or("no pooled map came back")?;
    let mut m = pooled.mean.slice(s![0, 0, .., ..]).to_owned();
    for (c, mut col) in m.axis_iter_mut(Axis(1)).enumerate() {
        let width = (pooled.col_edges[c + 1] - pooled.col_edges[c]) as f32;
        col.mapv_inplace(|x| x * width);
    }
    Ok((m, pooled.row_edges.clone(), pooled.col_edges.clone()))
}

fn figure(
    m: &Array2<f32>,
    rows: &[String],
    cols: &[String],
    title: String,
    cell: f64,
) -> (String, Value) {
    let mut h = Heatmap::new(m.view());
    h.row_labels = rows.to_vec();
    h.col_labels = cols.to_vec();
    h.title = title;
    h.cell = cell;
    h.values = m.ncols() <= 12;
    let origin = h.cell_rect(0, 0);
    (
        h.svg(),
        json!({ "x": origin.x, "y": origin.y, "cell": origin.size }),
    )
}

/// `(request, model)` to the long-text panel's data: the pooled map, the entropy of every
/// row of the chosen head, and, with `zoom: [r, c]`, that cell's region exactly.
pub(crate) async fn run_long(req: &Value, m: &Loaded) -> Result<Value, String> {
    let ctx = gpu().ok_or("the long-text view needs WebGPU in this browser")?;
    let g = m.gpu.as_ref().ok_or("the model is not on the GPU")?;
    let text = req["long"].as_str().unwrap_or("");
    let key = (m as *const Loaded as usize, text.to_string());
    let pass = match LONG.with(|p| p.borrow().clone()).filter(|p| p.key == key) {
        Some(p) => p,
        None => {
            let tokens = m.model.tokenize(text).map_err(err)?;
            let max = m.model.info().max_positions.min(MAX_TOKENS);
            if tokens.len() > max {
                return Err(format!(
                    "the text has {} tokens; this view takes at most {max} for this model",
                    tokens.len()
                ));
            }
            let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
            let t0 = now();
            let inputs = g.attention_inputs(&ctx, &ids).await.map_err(err)?;
            let p = Rc::new(LongPass {
                key,
                tokens,
                inputs,
                forward_ms: now() - t0,
            });
            LONG.with(|l| *l.borrow_mut() = Some(p.clone()));
            p
        }
    };
    let info = m.model.info();
    let n = pass.tokens.len();
    let layer = (req["layer"].as_u64().unwrap_or(0) as usize).min(info.layers - 1);
    let head = (req["head"].as_u64().unwrap_or(0) as usize).min(info.heads - 1);
    let pool = (req["pool"].as_u64().unwrap_or(64) as usize).clamp(1, 1024);
    let LayerInputs { q, k, .. } = &pass.inputs[layer];
    let opts = AttentionOptions {
        causal: info.causal,
        ..Default::default()
    };
    let heads = [head];
    let ask = PatternOptions {
        heads: Some(&heads),
        pool: Some(pool),
        entropy: true,
        ..Default::default()
    };
    let t0 = now();
    let got = attention_patterns_async(&ctx, q.view(), k.view(), &opts, &ask)
        .await
        .map_err(|e| e.to_string())?;
    let patterns_ms = now() - t0;
    let want = patterns_reference(q.view(), k.view(), &opts, &ask).map_err(|e| e.to_string())?;
    let (map, row_edges, col_edges) = mass(&got)?;
    let (map_ref, _, _) = mass(&want)?;
    let entropy = got
        .entropy
        .as_ref()
        .map(|e| e.slice(s![0, head, ..]).to_vec())
        .unwrap_or_default();
    let entropy_ref = want
        .entropy
        .as_ref()
        .map(|e| e.slice(s![0, head, ..]).to_vec())
        .unwrap_or_default();
    // What the view held on the device: q and k, the outputs and the call's scratch.
    let outputs = (2 * map.len() + entropy.len() * info.heads) as u64 * 4;
    let device_bytes = (q.len() + k.len()) as u64 * 4 + outputs + got.scratch_bytes;
    let (rows, cols) = (
        cell_labels(&pass.tokens, &row_edges),
        cell_labels(&pass.tokens, &col_edges),
    );
    let cell = (640.0 / map.ncols() as f64).clamp(3.0, 40.0);
    let (svg, grid) = figure(
        &map,
        &rows,
        &cols,
        format!(
            "{} · layer {layer} · head {head} · {n} tokens pooled to {} × {}",
            info.architecture,
            map.nrows(),
            map.ncols()
        ),
        cell,
    );
    let mut result = json!({
        "tokens": n,
        "layer": layer,
        "head": head,
        "pool": [map.nrows(), map.ncols()],
        "row_edges": row_edges,
        "col_edges": col_edges,
        "map": matrix_json(map.view()),
        "map_badge": max_diff(map.as_slice().unwrap_or(&[]), map_ref.as_slice().unwrap_or(&[])),
        "entropy": entropy,
        "entropy_badge": max_diff(&entropy, &entropy_ref),
        "svg": svg,
        "grid": grid,
        "device_bytes": device_bytes,
        "forward_ms": pass.forward_ms,
        "patterns_ms": patterns_ms,
    });
    if req["expose"].as_bool() == Some(true) {
        // The head's own q and k (its key head under grouped-query attention), so a test
        // can rebuild the full matrix independently.
        let kv = head * k.dim().1 / q.dim().1;
        result["q"] = matrix_json(q.slice(s![0, head, .., ..]));
        result["k"] = matrix_json(k.slice(s![0, kv, .., ..]));
        result["scale"] = json!(1.0 / (q.dim().3 as f64).sqrt());
    }
    if let Value::Array(z) = &req["zoom"] {
        let at = |i: usize| z.get(i).and_then(Value::as_u64).map(|v| v as usize);
        if let (Some(r), Some(c)) = (at(0), at(1)) {
            if r + 1 >= row_edges.len() || c + 1 >= col_edges.len() {
                return Err(format!(
                    "zoom: cell ({r}, {c}) is outside the {} × {} map",
                    map.nrows(),
                    map.ncols()
                ));
            }
            let (rr, cc): (Range<usize>, Range<usize>) = (
                row_edges[r]..row_edges[r + 1],
                col_edges[c]..col_edges[c + 1],
            );
            let zask = PatternOptions {
                heads: Some(&heads),
                rows: Some(rr.clone()),
                cols: Some(cc.clone()),
                weights: true,
                ..Default::default()
            };
            let t0 = now();
            let zg = attention_patterns_async(&ctx, q.view(), k.view(), &opts, &zask)
                .await
                .map_err(|e| e.to_string())?;
            let zoom_ms = now() - t0;
            let zw =
                patterns_reference(q.view(), k.view(), &opts, &zask).map_err(|e| e.to_string())?;
            let pick = |p: &AttentionPatterns| {
                p.weights
                    .as_ref()
                    .map(|w| w.slice(s![0, 0, .., ..]).to_owned())
                    .unwrap_or_default()
            };
            let (w, wr) = (pick(&zg), pick(&zw));
            let label = |range: &Range<usize>| -> Vec<String> {
                range.clone().map(|i| pass.tokens[i].text.clone()).collect()
            };
            let (zsvg, _) = figure(
                &w,
                &label(&rr),
                &label(&cc),
                format!(
                    "zoom: queries {}..{}, keys {}..{} (exact weights)",
                    rr.start, rr.end, cc.start, cc.end
                ),
                (480.0 / w.ncols().max(1) as f64).clamp(6.0, 40.0),
            );
            result["zoom"] = json!({
                "cell": [r, c],
                "rows": [rr.start, rr.end],
                "cols": [cc.start, cc.end],
                "weights": matrix_json(w.view()),
                "badge": max_diff(w.as_slice().unwrap_or(&[]), wr.as_slice().unwrap_or(&[])),
                "svg": zsvg,
                "ms": zoom_ms,
            });
        }
    }
    Ok(result)
}
