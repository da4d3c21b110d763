//! The attention lab: one page that runs the crate's kernels in the browser (wasm32 +
//! WebGPU) on a sentence as typed, and shows what attention computes: the heatmap of a
//! head with its values, the token strip, the four steps Q·Kᵀ → ÷√d_k → mask → softmax →
//! ·V on the head's real tensors, every head as thumbnails (grouped-query heads that share
//! a key/value head boxed together), "what if" switches (scale, K = Q, causal, a window),
//! cross-attention through the multi-head layer, and the sentence fed through the KV cache
//! one token at a time. Every matrix carries its largest difference from the CPU reference
//! computed in the same page; without WebGPU the page says so and runs the CPU path.
//!
//! Build and serve with `examples/lab/serve.sh`; `examples/lab/check.py` drives it in
//! headless Chromium.

#![cfg(target_arch = "wasm32")]

#[path = "builtin.rs"]
mod builtin;
#[path = "long.rs"]
mod long;
mod pair;
#[path = "real.rs"]
mod real;

use std::cell::RefCell;
use std::rc::Rc;

use ndarray::{s, Array2, Array4, ArrayView2, Ix2};
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;
use wgpu_attention::model::bert::BertModel;
use wgpu_attention::model::llama::LlamaModel;
use wgpu_attention::model::{GenerateOptions, Model, ModelError, ModelGpu, Sampling};
use wgpu_attention::viz::{head_stats, word_attention, Grid, Heatmap};
use wgpu_attention::{
    attention_async, attention_cpu, attention_reference, mha_async, mha_cpu, mha_incremental_async,
    AttentionOptions, GpuContext, HeadWeights, MhaGpuWeights, MhaOptions, MhaWeights, Projections,
    Window,
};

thread_local! {
    static GPU: RefCell<Option<Rc<GpuContext>>> = const { RefCell::new(None) };
    static MODEL: RefCell<Option<Rc<Loaded>>> = const { RefCell::new(None) };
}

/// A real model loaded into the page, with its weights on the GPU when there is one.
struct Loaded {
    model: Model,
    gpu: Option<ModelGpu>,
}

fn loaded() -> Option<Rc<Loaded>> {
    MODEL.with(|m| m.borrow().clone())
}

#[wasm_bindgen]
extern "C" {
    /// The page's clock, in milliseconds.
    #[wasm_bindgen(js_namespace = performance)]
    fn now() -> f64;
}

/// Puts a read model on the GPU (when there is one) and makes it the page's model.
/// Returns its sizes and how long reading (`read_ms`, measured by the caller) and the
/// upload took, as JSON.
fn install(model: Model, read_ms: f64) -> Result<String, JsValue> {
    let err = |e: ModelError| JsValue::from_str(&e.to_string());
    let t0 = now();
    let gpu = match gpu() {
        Some(ctx) => Some(model.upload(&ctx).map_err(err)?),
        None => None,
    };
    let upload_ms = now() - t0;
    let info = model.info();
    MODEL.with(|m| *m.borrow_mut() = Some(Rc::new(Loaded { model, gpu })));
    Ok(json!({
        "architecture": info.architecture,
        "layers": info.layers,
        "heads": info.heads,
        "kv_heads": info.kv_heads,
        "causal": info.causal,
        "max_positions": info.max_positions,
        "read_ms": read_ms,
        "upload_ms": upload_ms,
    })
    .to_string())
}

/// Loads a BERT encoder from its three files' bytes (served by `serve.sh` from the model
/// cache). Returns the model's sizes as JSON.
#[wasm_bindgen]
pub fn load_bert(
    config: Vec<u8>,
    safetensors: Vec<u8>,
    tokenizer: Vec<u8>,
) -> Result<String, JsValue> {
    let t0 = now();
    let model = BertModel::from_parts(&config, &safetensors, &tokenizer)
        .map_err(|e| JsValue::from_str(&e.to_string()))?;
    install(Model::Bert(Box::new(model)), now() - t0)
}

/// Loads a llama-family decoder from a GGUF file's bytes. Returns its sizes as JSON.
#[wasm_bindgen]
pub fn load_llama(gguf: Vec<u8>) -> Result<String, JsValue> {
    let t0 = now();
    let model =
        LlamaModel::from_gguf_bytes(&gguf).map_err(|e| JsValue::from_str(&e.to_string()))?;
    install(Model::Llama(Box::new(model)), now() - t0)
}

#[wasm_bindgen]
extern "C" {
    /// The page's receiver of generated tokens.
    pub type TokenSink;
    #[wasm_bindgen(method)]
    fn push(this: &TokenSink, text: &str, cached: u32);
}

/// Greedy generation with the loaded causal model, one token at a time through its KV
/// cache; `sink.push(text, cached)` sees each new token and how many positions the cache
/// holds. Returns the whole continuation.
#[wasm_bindgen]
pub async fn generate(
    prompt: String,
    max_new_tokens: u32,
    sink: TokenSink,
) -> Result<String, JsValue> {
    let err = |e: ModelError| JsValue::from_str(&e.to_string());
    let Some(m) = loaded() else {
        return Err(JsValue::from_str("load a causal model first"));
    };
    let ids: Vec<u32> = m
        .model
        .tokenize(&prompt)
        .map_err(err)?
        .iter()
        .map(|t| t.id)
        .collect();
    let opts = GenerateOptions {
        max_new_tokens: max_new_tokens.clamp(1, 256) as usize,
        sampling: Sampling::Greedy,
        use_cache: true,
        stop_at_eos: true,
    };
    let mut cached = ids.len() as u32;
    let mut on_token = |id: u32| {
        let text = m.model.decode(&[id]).unwrap_or_default();
        sink.push(&text, cached);
        cached += 1;
    };
    let stats = match (gpu(), &m.gpu) {
        (Some(ctx), Some(g)) => g
            .generate(&ctx, &ids, &opts, &mut on_token)
            .await
            .map_err(err)?,
        _ => m
            .model
            .generate_cpu(&ids, &opts, &mut on_token)
            .map_err(err)?,
    };
    m.model.decode(&stats.generated).map_err(err)
}

fn gpu() -> Option<Rc<GpuContext>> {
    GPU.with(|g| g.borrow().clone())
}

/// Opens the browser's WebGPU adapter. Returns `webgpu: <adapter>` or `cpu: <why>`; in
/// the second case every later computation runs on the CPU path.
#[wasm_bindgen]
pub async fn init() -> String {
    match GpuContext::new_async().await {
        Ok(ctx) => {
            let name = ctx.adapter_info().name.clone();
            GPU.with(|g| *g.borrow_mut() = Some(Rc::new(ctx)));
            format!(
                "webgpu: {}",
                if name.is_empty() {
                    "unnamed adapter"
                } else {
                    &name
                }
            )
        }
        Err(e) => format!("cpu: {e}"),
    }
}

/// Runs one request (JSON, see `lab.js`) and returns every panel's data as JSON.
#[wasm_bindgen]
pub async fn compute(request: String) -> Result<String, JsValue> {
    let req: Value =
        serde_json::from_str(&request).map_err(|e| JsValue::from_str(&e.to_string()))?;
    match run(&req).await {
        Ok(v) => Ok(v.to_string()),
        Err(e) => Err(JsValue::from_str(&e)),
    }
}

struct Settings {
    causal: bool,
    scale: f32,
    scale_label: String,
    k_equals_q: bool,
    window: Option<(u32, u32)>,
    head: usize,
}

/// The switches of a request, for heads of dimension `head_dim` out of `heads`.
fn settings(req: &Value, head_dim: usize, heads: usize) -> Result<Settings, String> {
    let d = head_dim as f32;
    let (scale, scale_label) = match req["scale"].as_str().unwrap_or("sqrt") {
        "sqrt" => (1.0 / d.sqrt(), format!("1/√d_k = 1/√{head_dim}")),
        "none" => (1.0, "1 (no ÷√d_k)".to_string()),
        other => {
            let v: f32 = other
                .parse()
                .map_err(|_| format!("scale: {other:?} is not a number"))?;
            if !v.is_finite() {
                return Err(format!("scale: {v} is not finite"));
            }
            (v, format!("{v}"))
        }
    };
    let window = match &req["window"] {
        Value::Array(a) if a.len() == 2 => {
            let side = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
            match (side(&a[0]), side(&a[1])) {
                (Some(l), Some(r)) => Some((l, r)),
                _ => return Err("window: two non-negative whole numbers".into()),
            }
        }
        _ => None,
    };
    let head = req["head"].as_u64().unwrap_or(0) as usize;
    if head >= heads {
        return Err(format!("head: {head} is not below {heads}"));
    }
    Ok(Settings {
        causal: req["causal"].as_bool().unwrap_or(false),
        scale,
        scale_label,
        k_equals_q: req["k_equals_q"].as_bool().unwrap_or(false),
        window,
        head,
    })
}

fn tokens_of(text: &str, what: &str) -> Result<Vec<String>, String> {
    let tokens = builtin::tokenize(text);
    if tokens.is_empty() {
        return Err(format!("{what}: type a sentence"));
    }
    if tokens.len() > builtin::MAX_TOKENS {
        return Err(format!(
            "{what}: {} tokens; the lab takes at most {}",
            tokens.len(),
            builtin::MAX_TOKENS
        ));
    }
    Ok(tokens)
}

fn weights_of_layer() -> Result<MhaWeights, String> {
    let e = builtin::EMBED;
    let kv = builtin::KV_HEADS * builtin::HEAD_DIM;
    MhaWeights::new(
        Projections {
            q_weight: builtin::projection(builtin::WQ, e),
            q_bias: None,
            k_weight: builtin::projection(builtin::WK, kv),
            k_bias: None,
            v_weight: builtin::projection(builtin::WV, kv),
            v_bias: None,
            out_weight: builtin::projection(builtin::WO, e),
            out_bias: None,
        },
        builtin::HEADS,
        Some(builtin::KV_HEADS),
    )
    .map_err(|e| e.to_string())
}

fn matrix_json(m: ArrayView2<f32>) -> Value {
    Value::Array(m.outer_iter().map(|r| json!(r.to_vec())).collect())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn head_of(w: &Array4<f32>, h: usize) -> Array2<f32> {
    w.slice(s![0, h, .., ..])
        .into_dimensionality::<Ix2>()
        .expect("rank 4")
        .to_owned()
}

/// Head `h` of per-head multi-head weights `(1, H, L, S)`.
fn per_head(w: &Option<ndarray::ArrayD<f32>>, h: usize) -> Result<Array2<f32>, String> {
    w.as_ref()
        .ok_or("the layer returned no weights")?
        .slice(s![0, h, .., ..])
        .into_dimensionality::<Ix2>()
        .map(|m| m.to_owned())
        .map_err(|e| e.to_string())
}

fn heatmap_svg(m: ArrayView2<f32>, rows: &[String], cols: &[String], title: String) -> String {
    let mut h = Heatmap::new(m);
    h.row_labels = rows.to_vec();
    h.col_labels = cols.to_vec();
    h.title = title;
    h.values = m.ncols() <= 16;
    h.cell = if m.ncols() <= 16 { 44.0 } else { 20.0 };
    h.svg()
}

/// The word view of one matrix (see `viz::word_attention`).
fn words_of(m: &Array2<f32>, ranges: &[std::ops::Range<usize>]) -> Result<Array2<f32>, String> {
    word_attention(m.view(), ranges, ranges)
}

/// The word view of every layer and head of `(layers, heads, L, L)` weights.
fn words_of_all(a: &Array4<f32>, ranges: &[std::ops::Range<usize>]) -> Result<Array4<f32>, String> {
    let (layers, heads, _, _) = a.dim();
    let n = ranges.len();
    let mut out = Array4::<f32>::zeros((layers, heads, n, n));
    for l in 0..layers {
        for h in 0..heads {
            let w = words_of(&a.slice(s![l, h, .., ..]).to_owned(), ranges)?;
            out.slice_mut(s![l, h, .., ..]).assign(&w);
        }
    }
    Ok(out)
}

/// The step-by-step panel on one head's own q `(L, D)` and k `(S, D)`: Q·Kᵀ, the scaled
/// logits and the masked ones in f64 (`None` is −∞), then the kernel's softmax and ·V.
fn steps_json(
    (q, k): (ArrayView2<f32>, ArrayView2<f32>),
    set: &Settings,
    (softmax, out): (ArrayView2<f32>, ArrayView2<f32>),
    out_badge: f32,
) -> Value {
    let (l, s_len, d) = (q.nrows(), k.nrows(), q.ncols());
    let allowed = |i: usize, j: usize| {
        (!set.causal || j <= i)
            && set
                .window
                .is_none_or(|(left, right)| j + left as usize >= i && j <= i + right as usize)
    };
    let mut qk = Array2::<f64>::zeros((l, s_len));
    for i in 0..l {
        for j in 0..s_len {
            qk[[i, j]] = (0..d).map(|c| q[[i, c]] as f64 * k[[j, c]] as f64).sum();
        }
    }
    let scaled = qk.mapv(|x| x * set.scale as f64);
    let masked: Vec<Vec<Option<f64>>> = (0..l)
        .map(|i| {
            (0..s_len)
                .map(|j| allowed(i, j).then(|| scaled[[i, j]]))
                .collect()
        })
        .collect();
    json!({
        "qk": qk.outer_iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
        "scaled": scaled.outer_iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
        "masked": masked,
        "softmax": matrix_json(softmax),
        "out": matrix_json(out),
        "out_badge": out_badge,
    })
}

async fn run(req: &Value) -> Result<Value, String> {
    if req["mode"].as_str() == Some("pair") {
        // Two prompts: each through the page's own computation, then set side by side.
        let texts: Vec<&str> = req["pair"]
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let [a, b] = texts[..] else {
            return Err("pair: give two sentences".into());
        };
        let mut results = Vec::with_capacity(2);
        for (which, text) in [("A", a), ("B", b)] {
            let mut one = req.clone();
            one["mode"] = Value::Null;
            one["sentence"] = json!(text);
            one["cross"] = json!("");
            one["propagate"] = json!(false);
            let r = run_single(&one)
                .await
                .map_err(|e| format!("sentence {which}: {e}"))?;
            results.push(r);
        }
        let [ra, rb]: [Value; 2] = results.try_into().map_err(|_| "pair: two results")?;
        return pair::pair_of([a, b], [ra, rb]);
    }
    run_single(req).await
}

async fn run_single(req: &Value) -> Result<Value, String> {
    if req["model"].as_str().unwrap_or("builtin") != "builtin" {
        let m = loaded().ok_or("the model is still loading")?;
        if req["mode"].as_str() == Some("long") {
            return long::run_long(req, &m).await;
        }
        return real::run_model(req, &m).await;
    }
    let set = settings(req, builtin::HEAD_DIM, builtin::HEADS)?;
    let tokens = tokens_of(req["sentence"].as_str().unwrap_or(""), "sentence")?;
    let ctx = gpu();
    let backend = if ctx.is_some() { "webgpu" } else { "cpu" };
    let x = builtin::embed(&tokens);
    let q = builtin::heads(
        &x,
        &builtin::projection(builtin::WQ, builtin::HEADS * builtin::HEAD_DIM),
        builtin::HEADS,
    );
    let kv_heads = if set.k_equals_q {
        builtin::HEADS
    } else {
        builtin::KV_HEADS
    };
    let k = if set.k_equals_q {
        q.clone()
    } else {
        builtin::heads(
            &x,
            &builtin::projection(builtin::WK, kv_heads * builtin::HEAD_DIM),
            kv_heads,
        )
    };
    let v = builtin::heads(
        &x,
        &builtin::projection(builtin::WV, kv_heads * builtin::HEAD_DIM),
        kv_heads,
    );
    let opts = AttentionOptions {
        scale: Some(set.scale),
        causal: set.causal,
        window: set.window.map(|(a, b)| Window::new(a, b)),
        return_weights: true,
        ..Default::default()
    };
    // The badge's side is the float64 reference; without WebGPU the fast CPU path (one
    // thread, SIMD128 where the build enables it) is what the page shows.
    let cpu =
        attention_reference(q.view(), k.view(), v.view(), &opts).map_err(|e| e.to_string())?;
    let shown = match &ctx {
        Some(ctx) => attention_async(ctx, q.view(), k.view(), v.view(), &opts)
            .await
            .map_err(|e| e.to_string())?,
        None => attention_cpu(q.view(), k.view(), v.view(), &opts).map_err(|e| e.to_string())?,
    };
    let w = shown.weights.clone().expect("asked for weights");
    let w_cpu = cpu.weights.clone().expect("asked for weights");
    // The word switch: the heatmap, the strip and the thumbnails show whole words; the
    // step-by-step and the cache panels stay per token (they show the head's own tensors).
    let word_view = req["words"].as_bool().unwrap_or(false);
    let sentence = req["sentence"].as_str().unwrap_or("");
    let ranges = builtin::word_ranges(sentence);
    let (labels, w, w_cpu) = if word_view {
        let labels: Vec<String> = sentence.split_whitespace().map(str::to_string).collect();
        (
            labels,
            words_of_all(&w, &ranges)?,
            words_of_all(&w_cpu, &ranges)?,
        )
    } else {
        (tokens.clone(), w, w_cpu)
    };
    let h = set.head;
    let g = h / (builtin::HEADS / kv_heads);
    let head_w = head_of(&w, h);
    let head_cpu = head_of(&w_cpu, h);

    let out_head = shown.out.slice(s![0, h, .., ..]).to_owned();
    let step_head = head_of(shown.weights.as_ref().expect("asked for weights"), h);
    let grid_badges: Vec<f32> = (0..builtin::HEADS)
        .map(|hh| {
            max_diff(
                head_of(&w, hh).as_slice().unwrap(),
                head_of(&w_cpu, hh).as_slice().unwrap(),
            )
        })
        .collect();
    let panels: Vec<(String, Array2<f32>)> = (0..builtin::HEADS)
        .map(|hh| {
            (
                format!("head {hh} (kv {})", hh / (builtin::HEADS / kv_heads)),
                head_of(&w, hh),
            )
        })
        .collect();
    let mut grid = Grid::new(
        format!(
            "every head: {} query heads over {kv_heads} key/value heads",
            builtin::HEADS
        ),
        panels.iter().map(|(c, m)| (c.clone(), m.view())).collect(),
        builtin::HEADS,
    );
    grid.group = builtin::HEADS / kv_heads;
    grid.cell = (120.0 / labels.len() as f64).clamp(3.0, 16.0);
    grid.row_labels = labels.clone();
    grid.col_labels = labels.clone();

    let mut result = json!({
        "backend": backend,
        "tokens": labels,
        "step_tokens": tokens,
        "words": word_view,
        "word_ranges": ranges.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
        "heads": builtin::HEADS,
        "kv_heads": kv_heads,
        "head": h,
        "kv_head": g,
        "head_dim": builtin::HEAD_DIM,
        "scale": set.scale,
        "scale_label": set.scale_label,
        "causal": set.causal,
        "matrix": matrix_json(head_w.view()),
        "cpu_matrix": matrix_json(head_cpu.view()),
        "badge": max_diff(head_w.as_slice().unwrap(), head_cpu.as_slice().unwrap()),
        "svg": heatmap_svg(head_w.view(), &labels, &labels, format!("head {h}{} · “{sentence}”", if word_view { " · words" } else { "" })),
        "grid_svg": grid.svg(),
        "grid_badges": grid_badges,
        "order": (0..builtin::HEADS).map(|hh| [0, hh]).collect::<Vec<_>>(),
        "head_stats": head_stats(w.view().into_dyn())
            .map(|st| real::head_table(&st))
            .map_err(|e| e.to_string())?,
        "q": matrix_json(q.slice(s![0, h, .., ..])),
        "k": matrix_json(k.slice(s![0, g, .., ..])),
        "steps": steps_json(
            (q.slice(s![0, h, .., ..]), k.slice(s![0, g, .., ..])),
            &set,
            (step_head.view(), out_head.view()),
            max_diff(
                shown.out.slice(s![0, h, .., ..]).to_owned().as_slice().unwrap(),
                cpu.out.slice(s![0, h, .., ..]).to_owned().as_slice().unwrap()),
        ),
    });

    let layer = weights_of_layer()?;
    let layer_gpu = match &ctx {
        Some(ctx) => Some(MhaGpuWeights::upload(ctx, &layer).map_err(|e| e.to_string())?),
        None => None,
    };
    let cross_text = req["cross"].as_str().unwrap_or("").trim();
    if !cross_text.is_empty() {
        let source = tokens_of(cross_text, "cross sentence")?;
        let x2 = builtin::embed(&source);
        let mopts = MhaOptions {
            weights: HeadWeights::PerHead,
            ..Default::default()
        };
        let cpu = mha_cpu(&layer, x.view(), Some(x2.view()), &mopts).map_err(|e| e.to_string())?;
        let shown = match (&ctx, &layer_gpu) {
            (Some(ctx), Some(up)) => mha_async(ctx, up, x.view(), Some(x2.view()), &mopts)
                .await
                .map_err(|e| e.to_string())?,
            _ => cpu.clone(),
        };
        let (m, mc) = (per_head(&shown.weights, h)?, per_head(&cpu.weights, h)?);
        result["cross"] = json!({
            "tokens": source,
            "matrix": matrix_json(m.view()),
            "badge": max_diff(m.as_slice().unwrap(), mc.as_slice().unwrap()),
            "svg": heatmap_svg(m.view(), &tokens, &source,
                format!("cross-attention, head {h}: queries “{}”, keys and values “{}”", tokens.join(" "), source.join(" "))),
        });
    }

    // The sentence through the KV cache: step t adds key t and computes row t.
    let mopts = MhaOptions {
        weights: HeadWeights::PerHead,
        causal: true,
        ..Default::default()
    };
    let cpu = mha_cpu(&layer, x.view(), None, &mopts).map_err(|e| e.to_string())?;
    let stepped = match (&ctx, &layer_gpu) {
        (Some(ctx), Some(up)) => mha_incremental_async(ctx, up, x.view(), &mopts)
            .await
            .map_err(|e| e.to_string())?,
        _ => cpu.clone(),
    };
    let (m, mc) = (per_head(&stepped.weights, h)?, per_head(&cpu.weights, h)?);
    result["cache"] = json!({
        "matrix": matrix_json(m.view()),
        "badge": max_diff(m.as_slice().unwrap(), mc.as_slice().unwrap()),
    });
    Ok(result)
}
