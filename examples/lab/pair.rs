//! Two prompts side by side: the chosen layer and head on sentence A and on sentence B
//! (each exactly as the heatmap would show it, switches included) and their difference
//! on the diverging scale, the lecture's pairs ("Tom ate the dog" / "The dog ate Tom")
//! among them. Prompts of different lengths are compared over their first
//! `min(L_A, L_B)` positions, which the figure's title says.

use ndarray::{s, Array2};
use serde_json::{json, Value};
use wgpu_attention::viz::Heatmap;

use crate::matrix_json;

/// A result's `matrix` (rows of numbers) as an array.
fn matrix_of(r: &Value, which: &str) -> Result<Array2<f32>, String> {
    let rows = r["matrix"]
        .as_array()
        .ok_or_else(|| format!("sentence {which}: no matrix came back"))?;
    let n = rows.len();
    let m = rows.first().and_then(Value::as_array).map_or(0, Vec::len);
    let flat: Vec<f32> = rows
        .iter()
        .flat_map(|row| row.as_array().cloned().unwrap_or_default())
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    Array2::from_shape_vec((n, m), flat).map_err(|e| format!("sentence {which}: {e}"))
}

fn labels_of(r: &Value) -> Vec<String> {
    r["tokens"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn figure(m: &Array2<f32>, rows: &[String], title: String, diff: Option<f32>) -> String {
    let mut h = Heatmap::new(m.view());
    h.row_labels = rows.to_vec();
    h.col_labels = rows.to_vec();
    h.title = title;
    h.values = m.ncols() <= 10;
    h.cell = if m.ncols() <= 10 { 30.0 } else { 12.0 };
    h.difference = diff;
    h.svg()
}

/// `results`: the page's own result for sentence A and for sentence B (same layer, head
/// and switches). Returns A, B, A − B over their common positions, the three figures, and
/// what each sentence's result exposes for checking (q, k, scale, causal, badge).
pub(crate) fn pair_of(texts: [&str; 2], results: [Value; 2]) -> Result<Value, String> {
    let [ra, rb] = results;
    let (a, b) = (matrix_of(&ra, "A")?, matrix_of(&rb, "B")?);
    let (la, lb) = (labels_of(&ra), labels_of(&rb));
    if a.nrows() != la.len() || b.nrows() != lb.len() {
        return Err("a sentence's matrix and its tokens disagree".into());
    }
    let n = a.nrows().min(b.nrows());
    let diff = &a.slice(s![..n, ..n]) - &b.slice(s![..n, ..n]);
    let common: Vec<String> = la
        .iter()
        .zip(&lb)
        .take(n)
        .map(|(x, y)| {
            if x == y {
                x.clone()
            } else {
                format!("{x}/{y}")
            }
        })
        .collect();
    let range = diff.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let head = format!("head {}", ra["head"].as_u64().unwrap_or(0));
    let what = match ra["layer"].as_u64() {
        Some(l) => format!("layer {l} · {head}"),
        None => head,
    };
    let aligned = if a.nrows() == b.nrows() {
        format!("A − B · {what}")
    } else {
        format!(
            "A − B · {what} · their first {n} positions (A has {}, B {})",
            a.nrows(),
            b.nrows()
        )
    };
    let side = |r: &Value| {
        json!({
            "tokens": r["tokens"],
            "q": r["q"],
            "k": r["k"],
            "scale": r["scale"],
            "causal": r["causal"],
            "badge": r["badge"],
        })
    };
    Ok(json!({
        "a": matrix_json(a.view()),
        "b": matrix_json(b.view()),
        "diff": matrix_json(diff.view()),
        "common": n,
        "same_length": a.nrows() == b.nrows(),
        "max_diff": range,
        "badge": ra["badge"].as_f64().unwrap_or(0.0).max(rb["badge"].as_f64().unwrap_or(0.0)),
        "side_a": side(&ra),
        "side_b": side(&rb),
        "svg_a": figure(&a, &la, format!("A · {what} · “{}”", texts[0]), None),
        "svg_b": figure(&b, &lb, format!("B · {what} · “{}”", texts[1]), None),
        "svg_diff": figure(&diff, &common, aligned, Some(if range > 0.0 { range } else { 1.0 })),
    }))
}
