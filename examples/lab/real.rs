//! The lab on a loaded model (MiniLM or SmolLM2): every layer's and head's attention from
//! its forward pass, and, on the chosen layer's real q, k and v from that pass, the
//! "what if" switches, the four steps, cross-attention between two sentences and the KV
//! cache growing one token at a time, all through the crate's kernels and badged against
//! the float64 reference. A sentence's pass is kept while only the switches, the layer or
//! the head change, so each change recomputes one head, not the model.

use std::cell::RefCell;
use std::rc::Rc;

use ndarray::{s, Array1, Array2, Array4, ArrayView2, Axis, Ix2};
use serde_json::{json, Value};
use wgpu_attention::model::{words, HeadPatch, LayerInputs, Model, ModelError, Token};
use wgpu_attention::viz::{grid_order, head_stats, Grid, GridOrder, HeadStats, Heatmap};
use wgpu_attention::{
    attention_async, attention_reference, AttentionOptions, AttentionOutput, GpuContext, Window,
};

use crate::{
    gpu, heatmap_svg, matrix_json, max_diff, now, settings, steps_json, words_of, words_of_all,
    Loaded, Settings,
};

/// One sentence's pass through the loaded model.
struct Pass {
    /// The model (by address) and the sentence it ran on.
    key: (usize, String),
    backend: &'static str,
    tokens: Vec<Token>,
    /// `(layers, heads, L, L)` from the pass shown, and from the float64 reference.
    att: Array4<f32>,
    att_cpu: Array4<f32>,
    /// Every layer's q, k and v from the GPU pass; empty without WebGPU.
    inputs: Vec<LayerInputs>,
    /// The last hidden state and a causal model's last logits, from the pass shown and
    /// from the reference.
    hidden: Array2<f32>,
    hidden_cpu: Array2<f32>,
    logits: Option<Array1<f32>>,
    forward_ms: f64,
    /// The second GPU pass that keeps every layer's q, k and v (0 without WebGPU).
    inputs_ms: f64,
    reference_ms: f64,
}

/// The cross sentence's layer inputs, kept like the pass.
struct CrossPass {
    key: (usize, String),
    tokens: Vec<Token>,
    inputs: Vec<LayerInputs>,
}

thread_local! {
    static PASS: RefCell<Option<Rc<Pass>>> = const { RefCell::new(None) };
    static CROSS: RefCell<Option<Rc<CrossPass>>> = const { RefCell::new(None) };
}

fn err(e: ModelError) -> String {
    e.to_string()
}

/// The pass of `sentence`, run now or kept from the last request; and whether it was kept.
async fn pass_of(m: &Loaded, sentence: &str) -> Result<(Rc<Pass>, bool), String> {
    let key = (m as *const Loaded as usize, sentence.to_string());
    if let Some(p) = PASS.with(|p| p.borrow().clone()).filter(|p| p.key == key) {
        return Ok((p, true));
    }
    let tokens = m.model.tokenize(sentence).map_err(err)?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let t0 = now();
    // The forward pass alone is what the page's tokens per second measure; keeping every
    // layer's q, k and v for the what-if is a second pass, timed on its own.
    let (backend, shown, inputs, forward_ms, inputs_ms) = match (gpu(), &m.gpu) {
        (Some(ctx), Some(g)) => {
            let shown = g.forward(&ctx, &ids, true).await.map_err(err)?;
            let forward_ms = now() - t0;
            let t1 = now();
            let inputs = g.attention_inputs(&ctx, &ids).await.map_err(err)?;
            ("webgpu", shown, inputs, forward_ms, now() - t1)
        }
        _ => {
            let shown = m.model.forward_cpu(&ids, true).map_err(err)?;
            ("cpu", shown, Vec::new(), now() - t0, 0.0)
        }
    };
    let t0 = now();
    let cpu = m.model.forward_reference(&ids, true).map_err(err)?;
    let reference_ms = now() - t0;
    let pass = Rc::new(Pass {
        key,
        backend,
        tokens,
        att: shown.attention.ok_or("the model returned no attention")?,
        att_cpu: cpu.attention.ok_or("the model returned no attention")?,
        inputs,
        hidden: shown.hidden,
        hidden_cpu: cpu.hidden,
        logits: shown.logits,
        forward_ms,
        inputs_ms,
        reference_ms,
    });
    PASS.with(|p| *p.borrow_mut() = Some(pass.clone()));
    Ok((pass, false))
}

async fn cross_of(m: &Loaded, ctx: &GpuContext, sentence: &str) -> Result<Rc<CrossPass>, String> {
    let key = (m as *const Loaded as usize, sentence.to_string());
    if let Some(p) = CROSS.with(|p| p.borrow().clone()).filter(|p| p.key == key) {
        return Ok(p);
    }
    let g = m.gpu.as_ref().ok_or("the model is not on the GPU")?;
    let tokens = m.model.tokenize(sentence).map_err(err)?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let inputs = g.attention_inputs(ctx, &ids).await.map_err(err)?;
    let pass = Rc::new(CrossPass {
        key,
        tokens,
        inputs,
    });
    CROSS.with(|p| *p.borrow_mut() = Some(pass.clone()));
    Ok(pass)
}

/// Row block `h` of `(1, heads, L, D)` as `(L, D)`.
fn head2(a: &Array4<f32>, h: usize) -> ArrayView2<'_, f32> {
    a.slice(s![0, h, .., ..])
        .into_dimensionality::<Ix2>()
        .expect("rank 4")
}

fn as4(m: ArrayView2<f32>) -> Array4<f32> {
    let (r, c) = m.dim();
    m.to_owned()
        .into_shape_with_order((1, 1, r, c))
        .expect("one head")
}

/// One head's attention of `q` over `k`, `v` under `opts`: through the kernels, and the
/// float64 reference.
async fn one_head(
    ctx: &GpuContext,
    (q, k, v): (
        ArrayView2<'_, f32>,
        ArrayView2<'_, f32>,
        ArrayView2<'_, f32>,
    ),
    opts: &AttentionOptions<'_>,
) -> Result<(AttentionOutput, AttentionOutput), String> {
    let (q, k, v) = (as4(q), as4(k), as4(v));
    let shown = attention_async(ctx, q.view(), k.view(), v.view(), opts)
        .await
        .map_err(|e| e.to_string())?;
    let reference =
        attention_reference(q.view(), k.view(), v.view(), opts).map_err(|e| e.to_string())?;
    Ok((shown, reference))
}

fn weights2(o: &AttentionOutput) -> Array2<f32> {
    o.weights
        .as_ref()
        .map(|w| head2(w, 0).to_owned())
        .unwrap_or_default()
}

/// One row per layer × head: entropy (nats), attention to the previous and the first
/// token, the nearest other head and its Jensen-Shannon distance.
pub(crate) fn head_table(stats: &HeadStats) -> Value {
    Value::Array(
        stats
            .stats
            .iter()
            .map(|st| {
                json!({
                    "layer": st.layer,
                    "head": st.head,
                    "entropy": st.entropy,
                    "previous_token": st.previous_token,
                    "first_token": st.first_token,
                    "nearest": st.nearest.map(|n| [n.layer, n.head]),
                    "distance": st.nearest.map(|n| n.distance),
                })
            })
            .collect(),
    )
}

/// Each row's Euclidean length of `a - b`.
fn row_shift(a: &Array2<f32>, b: &Array2<f32>) -> Vec<f32> {
    (a - b)
        .axis_iter(Axis(0))
        .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
        .collect()
}

/// The `n` most likely next tokens of `logits` with their probabilities.
fn top(model: &Model, logits: &Array1<f32>, n: usize) -> Value {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let z: f64 = logits.iter().map(|&x| f64::from(x - m).exp()).sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    Value::Array(
        order
            .into_iter()
            .take(n)
            .map(|id| {
                json!({
                    "id": id,
                    "text": model.decode(&[id as u32]).unwrap_or_default(),
                    "p": f64::from(logits[id] - m).exp() / z,
                })
            })
            .collect(),
    )
}

/// The rest of the model run on the changed head (`patch`): how far each token's final
/// hidden state moved (the GPU pass, and the float64 reference with the same patch), and a
/// causal model's next-token top 5 before and after.
async fn propagate(
    m: &Loaded,
    ctx: &GpuContext,
    pass: &Pass,
    patch: &HeadPatch,
) -> Result<Value, String> {
    let t0 = now();
    let g = m.gpu.as_ref().ok_or("the model is not on the GPU")?;
    let ids: Vec<u32> = pass.tokens.iter().map(|t| t.id).collect();
    let got = g.forward_patched(ctx, &ids, patch).await.map_err(err)?;
    let ms = now() - t0;
    let want = m
        .model
        .forward_reference_patched(&ids, patch)
        .map_err(err)?;
    let shift = row_shift(&got.hidden, &pass.hidden);
    let shift_cpu = row_shift(&want.hidden, &pass.hidden_cpu);
    let mut v = json!({
        "shift": shift,
        "shift_cpu": shift_cpu,
        "badge": max_diff(&shift, &shift_cpu),
        "hidden_badge": max_diff(
            got.hidden.as_slice().unwrap_or(&[]),
            want.hidden.as_slice().unwrap_or(&[])
        ),
        "ms": ms,
    });
    if let (Some(before), Some(after)) = (&pass.logits, &got.logits) {
        v["top_before"] = top(&m.model, before, 5);
        v["top_after"] = top(&m.model, after, 5);
    }
    Ok(v)
}

/// Whether the switches are the model's own computation (its mask, 1/√d_k, its keys).
fn is_own(set: &Settings, causal: bool, head_dim: usize) -> bool {
    set.causal == causal
        && set.window.is_none()
        && !set.k_equals_q
        && (set.scale - 1.0 / (head_dim as f32).sqrt()).abs() <= f32::EPSILON
}

/// One figure of the side-by-side: small enough that three fit across a page; `diff`
/// draws signed differences.
fn side_svg(m: ArrayView2<f32>, labels: &[String], title: &str, diff: bool) -> String {
    let range = m.iter().fold(0.0f32, |a, x| a.max(x.abs()));
    let mut h = Heatmap::new(m);
    h.row_labels = labels.to_vec();
    h.col_labels = labels.to_vec();
    h.title = title.to_string();
    h.values = m.ncols() <= 10;
    h.cell = if m.ncols() <= 10 { 30.0 } else { 12.0 };
    if diff {
        h.difference = Some(if range > 0.0 { range } else { 1.0 });
    }
    h.svg()
}

/// A sentence through a real model: every layer's and head's attention from the GPU
/// forward pass (or, without WebGPU, the fast f32 CPU pass), badged against the float64
/// CPU forward pass of the same page; then the chosen head recomputed from its real q, k
/// and v with the switches applied, its four steps, cross-attention and the KV cache.
/// `forward_ms` is the time of the pass shown; `head_ms` that of this request's head work.
pub(crate) async fn run_model(req: &Value, m: &Loaded) -> Result<Value, String> {
    let sentence = req["sentence"].as_str().unwrap_or("");
    let (pass, reused) = pass_of(m, sentence).await?;
    let t_head = now();
    let info = m.model.info();
    let (layers, heads, l, _) = pass.att.dim();
    let layer = (req["layer"].as_u64().unwrap_or(0) as usize).min(layers - 1);
    let head = (req["head"].as_u64().unwrap_or(0) as usize).min(heads - 1);
    let set = settings(
        &json!({ "head": head, "scale": req["scale"], "causal": req["causal"],
        "k_equals_q": req["k_equals_q"], "window": req["window"] }),
        info.head_dim,
        heads,
    )?;
    let group = heads / info.kv_heads.max(1);
    let kv_head = head / group;
    let tokens = &pass.tokens;
    let token_texts: Vec<String> = tokens.iter().map(|t| t.text.clone()).collect();
    let word_view = req["words"].as_bool().unwrap_or(false);
    let words = words(sentence, tokens);
    let ranges: Vec<_> = words.iter().map(|w| w.tokens.clone()).collect();
    let to_view = |a: &Array2<f32>| -> Result<Array2<f32>, String> {
        if word_view {
            words_of(a, &ranges)
        } else {
            Ok(a.clone())
        }
    };
    let (texts, att, att_cpu) = if word_view {
        (
            words.iter().map(|w| w.text.clone()).collect::<Vec<_>>(),
            words_of_all(&pass.att, &ranges)?,
            words_of_all(&pass.att_cpu, &ranges)?,
        )
    } else {
        (token_texts.clone(), pass.att.clone(), pass.att_cpu.clone())
    };
    let pick = |a: &Array4<f32>, l: usize, h: usize| -> Array2<f32> {
        a.slice(s![l, h, .., ..]).to_owned()
    };
    let (own_mat, own_cpu) = (pick(&att, layer, head), pick(&att_cpu, layer, head));
    // Heads at a glance: each head's entropy, attention to the previous and the first
    // token and its nearest head, and the model view in the order asked for.
    let stats = head_stats(att.view().into_dyn()).map_err(|e| e.to_string())?;
    let order = match req["order"].as_str().unwrap_or("layer") {
        "entropy" => GridOrder::Entropy,
        "similarity" => GridOrder::Similarity,
        _ => GridOrder::Layer,
    };
    let placed = grid_order(&stats, order);
    let panels: Vec<(String, Array2<f32>)> = placed
        .iter()
        .map(|&(l, h)| (format!("L{l} H{h}"), pick(&att, l, h)))
        .collect();
    let mut grid = Grid::new(
        format!(
            "every layer × head ({layers} × {heads}; {group} query heads per key/value head){} · “{sentence}”",
            match order {
                GridOrder::Layer => "",
                GridOrder::Entropy => " · by entropy",
                GridOrder::Similarity => " · similar heads together",
            }
        ),
        panels.iter().map(|(c, p)| (c.clone(), p.view())).collect(),
        heads,
    );
    if order != GridOrder::Layer {
        grid.notes = placed
            .iter()
            .map(|&(l, h)| {
                stats
                    .get(l, h)
                    .map(|st| vec![format!("{:.2} nats", st.entropy)])
                    .unwrap_or_default()
            })
            .collect();
    }
    grid.group = group;
    grid.cell = (60.0 / texts.len() as f64).clamp(2.0, 8.0);
    let flat = |a: &Array4<f32>| a.iter().copied().collect::<Vec<f32>>();
    let title = |what: &str| {
        format!(
            "{} · layer {layer} · head {head}{what}{} · “{sentence}”",
            info.architecture,
            if word_view { " · words" } else { "" }
        )
    };
    let mut result = json!({
        "backend": pass.backend,
        "model": info.architecture,
        "tokens": texts,
        "ids": tokens.iter().map(|t| t.id).collect::<Vec<_>>(),
        "step_tokens": token_texts,
        "token_labels": token_texts,
        "raw_tokens": tokens.iter().map(|t| t.raw.clone()).collect::<Vec<_>>(),
        "words": word_view,
        "word_ranges": ranges.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
        "layers": layers,
        "layer": layer,
        "heads": heads,
        "kv_heads": info.kv_heads,
        "head": head,
        "kv_head": kv_head,
        "head_dim": info.head_dim,
        "model_causal": info.causal,
        "causal": info.causal,
        "scale": 1.0 / (info.head_dim as f32).sqrt(),
        "scale_label": format!("1/√d_k = 1/√{}", info.head_dim),
        "matrix": matrix_json(own_mat.view()),
        "cpu_matrix": matrix_json(own_cpu.view()),
        "badge": max_diff(own_mat.as_slice().unwrap_or(&[]), own_cpu.as_slice().unwrap_or(&[])),
        "svg": heatmap_svg(own_mat.view(), &texts, &texts, title("")),
        "grid_svg": grid.svg(),
        "grid_badges": [max_diff(&flat(&att), &flat(&att_cpu))],
        "order": placed.iter().map(|&(l, h)| [l, h]).collect::<Vec<_>>(),
        "head_stats": head_table(&stats),
        "forward_ms": pass.forward_ms,
        "inputs_ms": pass.inputs_ms,
        "reference_ms": pass.reference_ms,
        "pass_reused": reused,
    });
    let Some(ctx) = gpu().filter(|_| !pass.inputs.is_empty()) else {
        result["head_ms"] = json!(now() - t_head);
        result["real_panels"] = json!(
            "needs WebGPU in this browser: a loaded model's q, k and v come from its GPU pass"
        );
        return Ok(result);
    };

    // The chosen head on its real tensors, with the switches applied.
    let inputs = &pass.inputs[layer];
    let q = head2(&inputs.q, head);
    let k = if set.k_equals_q {
        q
    } else {
        head2(&inputs.k, kv_head)
    };
    let v = head2(&inputs.v, kv_head);
    let opts = AttentionOptions {
        scale: Some(set.scale),
        causal: set.causal,
        window: set.window.map(|(a, b)| Window::new(a, b)),
        return_weights: true,
        ..Default::default()
    };
    let (shown, reference) = one_head(&ctx, (q, k, v), &opts).await?;
    let (changed_tok, changed_ref) = (weights2(&shown), weights2(&reference));
    let own = is_own(&set, info.causal, info.head_dim);
    let changed = to_view(&changed_tok)?;
    let original = own_mat.clone();
    let diff = &changed - &original;
    result["q"] = matrix_json(q);
    result["k"] = matrix_json(k);
    result["scale"] = json!(set.scale);
    result["scale_label"] = json!(set.scale_label);
    result["causal"] = json!(set.causal);
    result["whatif"] = json!({
        "active": !own,
        "original": matrix_json(original.view()),
        "changed": matrix_json(changed.view()),
        "diff": matrix_json(diff.view()),
        "max_change": diff.iter().fold(0.0f32, |m, x| m.max(x.abs())),
        "svg_original": side_svg(original.view(), &texts, "as trained", false),
        "svg_changed": side_svg(changed.view(), &texts, "what if", false),
        "svg_diff": side_svg(diff.view(), &texts, "what if − as trained", true),
    });
    if !own {
        // The main heatmap shows the changed head, badged against float64 on the same
        // tensors.
        let changed_cpu = to_view(&changed_ref)?;
        result["matrix"] = matrix_json(changed.view());
        result["cpu_matrix"] = matrix_json(changed_cpu.view());
        result["badge"] = json!(max_diff(
            changed.as_slice().unwrap_or(&[]),
            changed_cpu.as_slice().unwrap_or(&[])
        ));
        result["svg"] = json!(heatmap_svg(
            changed.view(),
            &texts,
            &texts,
            title(" · what if")
        ));
    }
    let out = head2(&shown.out, 0);
    let out_badge = max_diff(
        out.to_owned().as_slice().unwrap_or(&[]),
        head2(&reference.out, 0)
            .to_owned()
            .as_slice()
            .unwrap_or(&[]),
    );
    result["steps"] = steps_json((q, k), &set, (changed_tok.view(), out), out_badge);

    if req["propagate"].as_bool().unwrap_or(false) && !own {
        let patch = HeadPatch {
            layer,
            head,
            out: out.to_owned(),
        };
        result["propagate"] = propagate(m, &ctx, &pass, &patch).await?;
    }

    // Cross-attention: this sentence's queries of the chosen layer against another
    // sentence's keys and values of the same layer (each from its own pass through the
    // layer's real projections; a synthetic experiment: the model never saw this).
    let cross_text = req["cross"].as_str().unwrap_or("").trim();
    if !cross_text.is_empty() {
        let other = cross_of(m, &ctx, cross_text).await?;
        let src = &other.inputs[layer];
        let (kx, vx) = (head2(&src.k, kv_head), head2(&src.v, kv_head));
        let copts = AttentionOptions {
            return_weights: true,
            ..Default::default()
        };
        let (shown, reference) = one_head(&ctx, (q, kx, vx), &copts).await?;
        let (w, wr) = (weights2(&shown), weights2(&reference));
        let source: Vec<String> = other.tokens.iter().map(|t| t.text.clone()).collect();
        result["cross"] = json!({
            "tokens": source,
            "matrix": matrix_json(w.view()),
            "badge": max_diff(w.as_slice().unwrap_or(&[]), wr.as_slice().unwrap_or(&[])),
            "svg": heatmap_svg(w.view(), &token_texts, &source, format!(
                "cross-attention (synthetic), layer {layer}, head {head}: queries “{sentence}”, keys and values “{cross_text}”")),
        });
    }

    // The KV cache of a causal model: token t's query against the t + 1 keys the cache
    // holds after it (one decode call per token, key length t + 1).
    if info.causal {
        let k_own = head2(&inputs.k, kv_head);
        let mut rows = Array2::<f32>::zeros((l, l));
        let mut want = Array2::<f32>::zeros((l, l));
        for t in 0..l {
            let lens = [t as u32 + 1];
            let dopts = AttentionOptions {
                kv_lens: Some(&lens),
                return_weights: true,
                ..Default::default()
            };
            let (shown, reference) =
                one_head(&ctx, (q.slice(s![t..t + 1, ..]), k_own, v), &dopts).await?;
            rows.row_mut(t).assign(&weights2(&shown).row(0));
            want.row_mut(t).assign(&weights2(&reference).row(0));
        }
        result["cache"] = json!({
            "matrix": matrix_json(rows.view()),
            "badge": max_diff(rows.as_slice().unwrap_or(&[]), want.as_slice().unwrap_or(&[])),
            "keys": matrix_json(k_own.slice(s![.., ..k_own.ncols().min(8)])),
            "values": matrix_json(v.slice(s![.., ..v.ncols().min(8)])),
            "real": true,
        });
    } else {
        result["cache_note"] = json!(
            "an encoder attends in both directions and keeps no KV cache: load SmolLM2 for the cache"
        );
    }
    result["head_ms"] = json!(now() - t_head);
    Ok(result)
}
