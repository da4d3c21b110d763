//! `wgpu-attention model info|tokenize|attention|rollout|heads|next|generate|embed|similarity`: real
//! pretrained models
//! (a Hugging Face BERT directory or a llama-family GGUF file) on the GPU kernels or the
//! fast f32 CPU path. Every input is checked before a device opens; outputs are written
//! only once everything they hold has been computed.

use super::io::stdout::{out, out_inline};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use ndarray::Array4;
use wgpu_attention::model::llama::ChatMessage;
use wgpu_attention::model::{GenerateOptions, Model, ModelGpu, Sampling, StageTimes, Token};
use wgpu_attention::viz::{attention_rollout, head_stats, HeadStats, RolloutOptions};
use wgpu_attention::AttentionError;

use super::args::{Backend, ModelArg, ModelCommand, TextArg};
use super::embed;
use super::exit::CliError;
use super::io::output::OutputSet;
use super::model_common::{attention_of, forward, gpu, load, to_cli, tokens};
use super::model_patterns;
use super::npy;
use super::token_json;

pub fn run(cmd: &ModelCommand) -> Result<(), CliError> {
    match cmd {
        ModelCommand::Info { model } => info(&load(model)?),
        ModelCommand::Embed(args) => embed::embed(args),
        ModelCommand::Similarity(args) => embed::similarity(args),
        ModelCommand::Tokenize { model, text } => {
            let model = load(model)?;
            for line in tokenize_lines(&tokens(&model, text)?) {
                out!("{line}");
            }
            Ok(())
        }
        ModelCommand::Attention {
            model,
            text,
            out,
            tokens_out,
            backend,
            repeat,
            stages,
            patterns,
        } => {
            let outs = (out.as_deref(), tokens_out.as_deref());
            if patterns.any() {
                if *repeat > 0 || *stages {
                    let flag = if *stages { "--stages" } else { "--repeat" };
                    return Err(CliError::input(
                        flag,
                        "times the full forward pass; it does not combine with the pattern flags",
                    ));
                }
                return model_patterns::patterns(model, text, outs, *backend, patterns);
            }
            // Without a pattern flag --out is required (clap: unless --entropy).
            let out = out
                .as_deref()
                .ok_or_else(|| CliError::input("--out", "is required"))?;
            attention(
                model,
                text,
                (out, tokens_out.as_deref()),
                *backend,
                (*repeat, *stages),
            )
        }
        ModelCommand::Rollout {
            model,
            text,
            out,
            tokens_out,
            residual,
            backend,
        } => rollout(
            model,
            text,
            (out, tokens_out.as_deref()),
            *residual,
            *backend,
        ),
        ModelCommand::Heads {
            model,
            text,
            json,
            backend,
        } => heads(model, text, json.as_deref(), *backend),
        ModelCommand::Next {
            model,
            text,
            top,
            logits_out,
            backend,
        } => next(model, text, *top, logits_out.as_deref(), *backend),
        ModelCommand::Generate {
            model,
            text,
            max_new_tokens,
            temperature,
            top_k,
            seed,
            no_cache,
            ignore_eos,
            chat,
            system,
            backend,
            stages,
        } => {
            if *stages && *backend != Backend::Gpu {
                return Err(CliError::input(
                    "--stages",
                    "times the GPU's passes: it needs --backend gpu",
                ));
            }
            if !(temperature.is_finite() && *temperature >= 0.0) {
                return Err(CliError::input(
                    "--temperature",
                    format!("must be a finite number >= 0, got {temperature}"),
                ));
            }
            let sampling = if *temperature == 0.0 {
                Sampling::Greedy
            } else {
                Sampling::Sample {
                    temperature: *temperature,
                    top_k: *top_k,
                    seed: *seed,
                }
            };
            let opts = GenerateOptions {
                max_new_tokens: *max_new_tokens,
                sampling,
                use_cache: !no_cache,
                stop_at_eos: !ignore_eos,
            };
            let chat = chat.then_some(system.as_deref());
            generate(model, text, &opts, chat, (*backend, *stages))
        }
    }
}

/// `model tokenize`'s lines: the id, the label figures show, the vocabulary's spelling,
/// and the word the token belongs to.
fn tokenize_lines(tokens: &[Token]) -> Vec<String> {
    let width = tokens
        .iter()
        .map(|t| t.text.chars().count())
        .max()
        .unwrap_or(0);
    tokens
        .iter()
        .map(|t| {
            let pad = width - t.text.chars().count();
            format!(
                "{:>8}  {}{}  word {:<3}  {}",
                t.id,
                t.text,
                " ".repeat(pad),
                t.word,
                t.raw
            )
        })
        .collect()
}

fn info(model: &Model) -> Result<(), CliError> {
    let i = model.info();
    out!("architecture: {}", i.architecture);
    out!("layers: {}", i.layers);
    out!("heads: {} (key/value heads: {})", i.heads, i.kv_heads);
    out!("hidden: {} (head dim {})", i.hidden, i.head_dim);
    out!("intermediate: {}", i.intermediate);
    out!("vocab: {}", i.vocab);
    out!("max positions: {}", i.max_positions);
    out!(
        "attention: {}",
        if i.causal { "causal" } else { "bidirectional" }
    );
    out!("tokenizer: {}", i.tokenizer);
    for (name, sha) in &i.files {
        out!("file: {name} sha256 {sha}");
    }
    Ok(())
}

/// One stderr line per stage, in milliseconds.
fn print_stages(backend: Backend, t: &StageTimes) {
    for (stage, seconds) in t.entries() {
        eprintln!("{backend:?} stage {stage}: {:.2} ms", seconds * 1e3);
    }
    eprintln!("{backend:?} stages total: {:.2} ms", t.total() * 1e3);
}

/// Seconds since `start`.
fn since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn attention(
    model: &ModelArg,
    text: &TextArg,
    (out, tokens_out): (&Path, Option<&Path>),
    backend: Backend,
    (repeat, stages): (usize, bool),
) -> Result<(), CliError> {
    // Claimed first: a colliding or unwritable output is bad input before any work.
    let mut files = OutputSet::new();
    let out_slot = files.claim("--out", out)?;
    let tokens_slot = tokens_out
        .map(|p| files.claim_text("--tokens-out", p))
        .transpose()?;
    let start = Instant::now();
    let model = load(model)?;
    let load_s = since(start);
    let start = Instant::now();
    let tokens = tokens(&model, text)?;
    let tokenize_s = since(start);
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let mut times = Vec::new();
    let (result, upload_s) = match backend {
        Backend::Cpu => {
            let mut result = None;
            for _ in 0..=repeat {
                let start = Instant::now();
                result = Some(model.forward_cpu(&ids, true).map_err(to_cli)?);
                times.push(since(start));
            }
            if let (true, Model::Bert(bert)) = (stages, &model) {
                let (_, t) = bert.forward_cpu_timed(&ids, true).map_err(to_cli)?;
                print_stages(backend, &t);
            }
            (result, 0.0)
        }
        Backend::Gpu => {
            let ctx = gpu()?;
            let start = Instant::now();
            let weights = model.upload(&ctx).map_err(to_cli)?;
            let upload_s = since(start);
            let mut result = None;
            for _ in 0..=repeat {
                let start = Instant::now();
                let run = pollster::block_on(weights.forward(&ctx, &ids, true));
                result = Some(run.map_err(to_cli)?);
                times.push(since(start));
            }
            if let (true, ModelGpu::Bert(bert)) = (stages, &weights) {
                let run = pollster::block_on(bert.forward_timed(&ctx, &ids, true));
                print_stages(backend, &run.map_err(to_cli)?.1);
            }
            (result, upload_s)
        }
    };
    let probs: Array4<f32> = result
        .and_then(|r| r.attention)
        .ok_or_else(|| CliError::runtime("the forward pass returned no attention probabilities"))?;
    npy::write(&mut files, out_slot, &probs)?;
    if let Some(slot) = tokens_slot {
        let json = token_json::to_json(&text.text, &tokens);
        files.write(slot, |w| w.write_all(&json))?;
    }
    // Standard output may be carrying the array.
    let to_stderr = files.uses_stdout();
    files.commit()?;
    let (l, h, n, _) = probs.dim();
    let summary = format!(
        "{}: float32 ({l}, {h}, {n}, {n}) attention probabilities of {n} tokens",
        out.display()
    );
    if to_stderr {
        eprintln!("{summary}");
    } else {
        out!("{summary}");
    }
    let first = times.first().copied().unwrap_or_default();
    let mut warm = times[1..].to_vec();
    warm.sort_by(f64::total_cmp);
    let median = warm.get(warm.len() / 2).map_or(String::new(), |m| {
        format!(", then median {:.1} ms over {} runs", m * 1e3, warm.len())
    });
    eprintln!(
        "{backend:?}: load {:.1} ms, tokenize {:.2} ms, upload {:.1} ms, forward {:.1} ms{median}",
        load_s * 1e3,
        tokenize_s * 1e3,
        upload_s * 1e3,
        first * 1e3,
    );
    Ok(())
}

fn rollout(
    model: &ModelArg,
    text: &TextArg,
    (out, tokens_out): (&Path, Option<&Path>),
    residual: f64,
    backend: Backend,
) -> Result<(), CliError> {
    let options = RolloutOptions {
        residual,
        ..RolloutOptions::default()
    };
    // A library error about the residual is the flag's; any other is the forward pass's.
    let to_cli_rollout = |e: AttentionError| match e {
        AttentionError::InvalidOption {
            arg: "residual",
            detail,
        } => CliError::input("--residual", detail),
        other => CliError::runtime(format!("rollout of the model's attention: {other}")),
    };
    options.validate().map_err(to_cli_rollout)?;
    // Claimed first: a colliding or unwritable output is bad input before any work.
    let mut files = OutputSet::new();
    let out_slot = files.claim("--out", out)?;
    let tokens_slot = tokens_out
        .map(|p| files.claim_text("--tokens-out", p))
        .transpose()?;
    let (probs, tokens) = attention_of(model, text, backend)?;
    let r = attention_rollout(probs.view().into_dyn(), &options).map_err(to_cli_rollout)?;
    npy::write(&mut files, out_slot, &r)?;
    if let Some(slot) = tokens_slot {
        let json = token_json::to_json(&text.text, &tokens);
        files.write(slot, |w| w.write_all(&json))?;
    }
    // Standard output may be carrying the array.
    let to_stderr = files.uses_stdout();
    files.commit()?;
    let (layers, _, n, _) = probs.dim();
    let summary = format!(
        "{}: float32 ({n}, {n}) attention rollout of {n} tokens through {layers} layers (residual {residual})",
        out.display()
    );
    if to_stderr {
        eprintln!("{summary}");
    } else {
        out!("{summary}");
    }
    Ok(())
}

fn heads(
    model: &ModelArg,
    text: &TextArg,
    json: Option<&Path>,
    backend: Backend,
) -> Result<(), CliError> {
    // Claimed first: an unwritable output is bad input before any work.
    let mut files = OutputSet::new();
    let json_slot = json.map(|p| files.claim_text("--json", p)).transpose()?;
    let (probs, tokens) = attention_of(model, text, backend)?;
    let stats = head_stats(probs.view().into_dyn())
        .map_err(|e| CliError::runtime(format!("head statistics of the model's attention: {e}")))?;
    if let Some(slot) = json_slot {
        let labels: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
        let doc = heads_json(&stats, &labels);
        let bytes = serde_json::to_vec_pretty(&doc)
            .map_err(|e| CliError::runtime(format!("head statistics as JSON: {e}")))?;
        files.write(slot, |w| {
            w.write_all(&bytes)?;
            w.write_all(b"\n")
        })?;
    }
    // Standard output may be carrying the JSON.
    let to_stderr = files.uses_stdout();
    files.commit()?;
    let mut table = heads_table(&stats).join("\n");
    table.push('\n');
    let written = if to_stderr {
        std::io::stderr().lock().write_all(table.as_bytes())
    } else {
        std::io::stdout().lock().write_all(table.as_bytes())
    };
    match written {
        // A reader that stopped early (`| head`) took all it wanted.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::runtime(format!("writing the table: {e}")))
        }
        _ => Ok(()),
    }
}

/// `model heads`' table: a header, then one line per layer × head.
fn heads_table(stats: &HeadStats) -> Vec<String> {
    let mut lines = vec![format!(
        "{:>5} {:>4} {:>13} {:>10} {:>11} {:>7} {:>8}",
        "layer", "head", "entropy(nats)", "prev-token", "first-token", "nearest", "distance"
    )];
    for h in &stats.stats {
        let (nearest, distance) = h.nearest.map_or(("-".to_string(), "-".to_string()), |n| {
            (
                format!("{}:{}", n.layer, n.head),
                format!("{:.4}", n.distance),
            )
        });
        lines.push(format!(
            "{:>5} {:>4} {:>13.4} {:>10.4} {:>11.4} {nearest:>7} {distance:>8}",
            h.layer, h.head, h.entropy, h.previous_token, h.first_token
        ));
    }
    lines
}

/// `model heads --json`: the tokens and one object per layer × head, layer-major.
fn heads_json(stats: &HeadStats, tokens: &[&str]) -> serde_json::Value {
    let heads: Vec<serde_json::Value> = stats
        .stats
        .iter()
        .map(|h| {
            serde_json::json!({
                "layer": h.layer,
                "head": h.head,
                "entropy": h.entropy,
                "previous_token": h.previous_token,
                "first_token": h.first_token,
                "nearest": h.nearest.map(|n| [n.layer, n.head]),
                "distance": h.nearest.map(|n| n.distance),
            })
        })
        .collect();
    serde_json::json!({
        "layers": stats.layers,
        "heads_per_layer": stats.heads,
        "tokens": tokens,
        "entropy_unit": "nats",
        "heads": heads,
    })
}

fn next(
    model: &ModelArg,
    text: &TextArg,
    top: usize,
    logits_out: Option<&Path>,
    backend: Backend,
) -> Result<(), CliError> {
    if top == 0 {
        return Err(CliError::input("--top", "must be at least 1"));
    }
    let mut files = OutputSet::new();
    let logits_slot = logits_out
        .map(|p| files.claim("--logits-out", p))
        .transpose()?;
    let model = load(model)?;
    if !model.info().causal {
        return Err(CliError::input(
            "--model",
            "BERT is an encoder: it has no next-token head",
        ));
    }
    let tokens = tokens(&model, text)?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let result = forward(&model, &ids, false, backend)?;
    let logits = result
        .logits
        .ok_or_else(|| CliError::runtime("the forward pass returned no logits"))?;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f64 = logits.iter().map(|&z| f64::from(z - max).exp()).sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Highest first; ties go to the lower id. NaN sorts last.
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let mut lines = Vec::new();
    for (rank, &id) in order.iter().take(top).enumerate() {
        let p = f64::from(logits[id] - max).exp() / total;
        let piece = model.decode(&[id as u32]).map_err(to_cli)?;
        lines.push(format!("{:>2}  {:>6}  {p:.4}  {:?}", rank + 1, id, piece));
    }
    if let Some(slot) = logits_slot {
        npy::write(&mut files, slot, &logits)?;
    }
    // Standard output may be carrying the logits.
    let to_stderr = files.uses_stdout();
    files.commit()?;
    for line in lines {
        if to_stderr {
            eprintln!("{line}");
        } else {
            out!("{line}");
        }
    }
    Ok(())
}

/// The prompt ids of a chat: the system message (if given) and the user's TEXT through
/// the model's chat template; from now on the model stops at the end of a turn.
fn chat_ids(model: &mut Model, text: &TextArg, system: Option<&str>) -> Result<Vec<u32>, CliError> {
    let Model::Llama(llama) = model else {
        return Err(CliError::input(
            "--model",
            "--chat needs a causal chat model",
        ));
    };
    if text.text.is_empty() {
        return Err(CliError::input("--text", "is empty"));
    }
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(ChatMessage::new("system", s));
    }
    messages.push(ChatMessage::new("user", &text.text));
    let ids = llama.chat_prompt(&messages).map_err(to_cli)?;
    llama.stop_at_end_of_turn();
    Ok(ids)
}

fn generate(
    model: &ModelArg,
    text: &TextArg,
    opts: &GenerateOptions,
    chat: Option<Option<&str>>,
    (backend, stages): (Backend, bool),
) -> Result<(), CliError> {
    let mut model = load(model)?;
    if !model.info().causal {
        return Err(CliError::input(
            "--model",
            "BERT is an encoder: it has no next-token head to generate with",
        ));
    }
    let ids: Vec<u32> = match chat {
        Some(system) => chat_ids(&mut model, text, system)?,
        None => tokens(&model, text)?.iter().map(|t| t.id).collect(),
    };
    let max = model.info().max_positions;
    if ids.len() > max {
        return Err(CliError::input(
            "--text",
            format!(
                "{} prompt tokens exceed the model's {max} positions",
                ids.len()
            ),
        ));
    }
    if ids.len() + opts.max_new_tokens > max {
        return Err(CliError::input(
            "--max-new-tokens",
            format!(
                "{} prompt tokens + {} new exceed the model's {max} positions",
                ids.len(),
                opts.max_new_tokens
            ),
        ));
    }
    let mut generated: Vec<u32> = Vec::new();
    let mut shown = String::new();
    // Decodes everything generated so far and prints what is new: a token may end in the
    // middle of a character, which the next token completes.
    let mut on_token = |id: u32| {
        generated.push(id);
        if let Ok(text) = model.decode(&generated) {
            if let Some(fresh) = text.strip_prefix(shown.as_str()) {
                out_inline!("{fresh}");
                shown = text;
            }
        }
    };
    let mut split = None;
    let stats = match backend {
        Backend::Cpu => model.generate_cpu(&ids, opts, &mut on_token),
        Backend::Gpu => {
            let ctx = gpu()?;
            let weights = model.upload(&ctx).map_err(to_cli)?;
            if stages {
                let run = weights.generate_with_stages(&ctx, &ids, opts, &mut on_token);
                pollster::block_on(run).map(|(stats, times)| {
                    split = Some(times);
                    stats
                })
            } else {
                pollster::block_on(weights.generate(&ctx, &ids, opts, &mut on_token))
            }
        }
    }
    .map_err(to_cli)?;
    out!();
    if let Some(times) = &split {
        eprintln!("device time per generated token, by stage (timestamp queries):");
        print_stages(backend, times);
    }
    if opts.max_new_tokens == 0 {
        // Nothing ran (`--max-new-tokens 0`): no rate to report.
        eprintln!(
            "prompt: {} tokens; nothing generated (--max-new-tokens 0), so the model did not run",
            stats.prompt_tokens
        );
        return Ok(());
    }
    // A rate over no time (nothing timed) prints as "-", not as infinity.
    let rate = |n: usize, s: f64, digits: usize| {
        if s > 0.0 {
            format!("{:.digits$}", n as f64 / s)
        } else {
            "-".to_string()
        }
    };
    let after_first = stats.generated.len().saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {:.3} s ({} tokens/s); generation: {} tokens in {:.3} s ({} tokens/s, {}, {backend:?})",
        stats.prompt_tokens,
        stats.prompt_seconds,
        rate(stats.prompt_tokens, stats.prompt_seconds, 1),
        after_first,
        stats.generate_seconds,
        rate(after_first, stats.generate_seconds, 2),
        if opts.use_cache { "KV cache" } else { "no cache" },
    );
    Ok(())
}
