//! `wgpu-attention model info|tokenize|attention|next|generate|embed|similarity`: real
//! pretrained models
//! (a Hugging Face BERT directory or a llama-family GGUF file) on the GPU kernels or the
//! fast f32 CPU path. Every input is checked before a device opens; outputs are written
//! only once everything they hold has been computed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Array4;
use wgpu_attention::model::llama::ChatMessage;
use wgpu_attention::model::{
    resolve_model_path, ForwardOutput, GenerateOptions, Model, ModelError, ModelGpu, Sampling,
    StageTimes, Token,
};
use wgpu_attention::GpuContext;

use super::args::Backend;
use super::exit::CliError;
use super::io::output::OutputSet;
use super::npy;

/// The flags shared by every `model` subcommand.
#[derive(Debug, clap::Args)]
pub struct ModelArg {
    /// A model directory (BERT: config.json, model.safetensors, tokenizer.json) or a .gguf
    /// file (llama family); `minilm` and `smollm2` name the models scripts/fetch-models.sh
    /// fetched.
    #[arg(long, value_name = "PATH")]
    pub model: String,
}

/// The text to run.
#[derive(Debug, clap::Args)]
pub struct TextArg {
    /// The input text.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub text: String,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Architecture, sizes, tokenizer and the sha256 of every file read.
    #[command(after_help = "Example:\n  wgpu-attention model info --model minilm")]
    Info {
        #[command(flatten)]
        model: ModelArg,
    },
    /// The tokens of a text and their ids, special tokens included.
    #[command(
        after_help = "Example:\n  wgpu-attention model tokenize --model smollm2 --text \"I love AI !\""
    )]
    Tokenize {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
    },
    /// The softmax attention probabilities of every layer and head for a text.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention model attention --model minilm --text \"The cat sat on the mat\" --out A.npy --tokens-out T.json"
        )
    )]
    Attention {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
        /// Where to write the probabilities: float32 (layers, heads, L, L); `-` is
        /// standard output.
        #[arg(long, value_name = "A.npy")]
        out: PathBuf,
        /// Also write the token strings as a JSON list (special tokens included).
        #[arg(long, value_name = "T.json")]
        tokens_out: Option<PathBuf>,
        /// Where to compute: the GPU kernels or the fast f32 CPU path.
        #[arg(long, value_enum, default_value_t = Backend::Gpu)]
        backend: Backend,
        /// Run the forward pass N more times and report their median time (the first
        /// run builds the GPU pipelines).
        #[arg(long, value_name = "N", default_value_t = 0)]
        repeat: usize,
        /// Then run one more forward pass stage by stage (each stage submitted and waited
        /// for on its own) and report the time of each, summed over layers (BERT).
        #[arg(long)]
        stages: bool,
    },
    /// The most likely next tokens after a text, with their probabilities (causal models).
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention model next --model smollm2 --text \"The capital of France is\" --top 5"
        )
    )]
    Next {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
        /// How many tokens to list.
        #[arg(long, value_name = "K", default_value_t = 5)]
        top: usize,
        /// Also write the logits at the last position: float32 (vocab,).
        #[arg(long, value_name = "LOGITS.npy")]
        logits_out: Option<PathBuf>,
        /// Where to compute: the GPU kernels or the fast f32 CPU path.
        #[arg(long, value_enum, default_value_t = Backend::Gpu)]
        backend: Backend,
    },
    /// Generates tokens after a text, streaming them to stdout; tokens per second for the
    /// prompt and for generation go to stderr (causal models). With --chat, TEXT is a
    /// user's message to an instruct model, put through the model's chat template.
    #[command(
        after_help = "Example:\n  wgpu-attention model generate --model smollm2 --text \"Once upon a time\" --max-new-tokens 32\n  wgpu-attention model generate --model smollm2 --chat --text \"What is the capital of France?\" --max-new-tokens 64"
    )]
    Generate {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
        /// How many tokens to generate at most (fewer when the model ends the text).
        #[arg(long, value_name = "N")]
        max_new_tokens: usize,
        /// Sampling temperature; 0 (the default) picks the most likely token.
        #[arg(
            long,
            value_name = "T",
            default_value_t = 0.0,
            allow_negative_numbers = true
        )]
        temperature: f32,
        /// Sample among the K most likely tokens only (0 = all).
        #[arg(long, value_name = "K", default_value_t = 0)]
        top_k: usize,
        /// Seed of the sampler: the same seed gives the same tokens.
        #[arg(long, value_name = "S", default_value_t = 0)]
        seed: u64,
        /// Recompute the whole sequence for every token instead of using the KV cache
        /// (for comparison).
        #[arg(long)]
        no_cache: bool,
        /// Keep generating past the end-of-sequence token (with --chat, past the end of
        /// the turn).
        #[arg(long)]
        ignore_eos: bool,
        /// Chat: TEXT is the user's message. The prompt is the chat template the model
        /// file carries (GGUF tokenizer.chat_template, rendered as transformers'
        /// apply_chat_template does, the assistant's turn opened), and generation stops at
        /// the template's end-of-turn token (SmolLM2: <|im_end|>), which is not printed.
        #[arg(long)]
        chat: bool,
        /// With --chat: a system message before the user's (else the template's own
        /// default, if it has one).
        #[arg(
            long,
            value_name = "TEXT",
            requires = "chat",
            allow_hyphen_values = true
        )]
        system: Option<String>,
        /// Where to compute: the GPU kernels or the fast f32 CPU path.
        #[arg(long, value_enum, default_value_t = Backend::Gpu)]
        backend: Backend,
    },
    /// Sentence embeddings (BERT sentence-transformers models): the pooling and
    /// normalisation of the model's modules.json, one float32 row per sentence.
    #[command(
        after_help = "Example:\n  wgpu-attention model embed --model minilm --text \"A cat sleeps\" --text \"A dog runs\" --out E.npy\n  wgpu-attention model embed --model minilm --input sentences.txt --out E.npy --batch 32"
    )]
    Embed(super::embed::EmbedArgs),
    /// The cosine similarity of two sentences' embeddings (BERT sentence-transformers
    /// models).
    #[command(
        after_help = "Example:\n  wgpu-attention model similarity --model minilm --text \"A cat sleeps\" --text \"A kitten naps\""
    )]
    Similarity(super::embed::SimilarityArgs),
}

/// A library error as the command line reports it: input errors name their flag.
pub(super) fn to_cli(e: ModelError) -> CliError {
    if !e.is_input_error() {
        return CliError::runtime(e.to_string());
    }
    match e {
        ModelError::Input { arg, detail } if arg.starts_with("--") => CliError::input(arg, detail),
        // Ids come from the text.
        ModelError::Input { detail, .. } => CliError::input("--text", detail),
        ModelError::Attention(a) => CliError::from(a),
        other => CliError::input("--model", other.to_string()),
    }
}

pub(super) fn load(arg: &ModelArg) -> Result<Model, CliError> {
    let path = resolve_model_path(&arg.model).map_err(to_cli)?;
    Model::load(&path).map_err(to_cli)
}

/// Tokenizes and checks the length against the model's positions.
fn tokens(model: &Model, text: &TextArg) -> Result<Vec<Token>, CliError> {
    let tokens = model.tokenize(&text.text).map_err(to_cli)?;
    let max = model.info().max_positions;
    if tokens.len() > max {
        return Err(CliError::input(
            "--text",
            format!("{} tokens exceed the model's {max} positions", tokens.len()),
        ));
    }
    Ok(tokens)
}

pub(super) fn gpu() -> Result<GpuContext, CliError> {
    GpuContext::new().map_err(|e| CliError::runtime(e.to_string()))
}

/// Every layer's and head's attention probabilities `(layers, heads, L, L)` of `text`,
/// with its tokens (for `heatmap --model`).
pub(super) fn attention_of(
    model: &ModelArg,
    text: &TextArg,
    backend: Backend,
) -> Result<(Array4<f32>, Vec<Token>), CliError> {
    let model = load(model)?;
    let tokens = tokens(&model, text)?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let probs = forward(&model, &ids, true, backend)?
        .attention
        .ok_or_else(|| CliError::runtime("the forward pass returned no attention probabilities"))?;
    Ok((probs, tokens))
}

fn forward(
    model: &Model,
    ids: &[u32],
    attention: bool,
    backend: Backend,
) -> Result<ForwardOutput, CliError> {
    match backend {
        Backend::Cpu => model.forward_cpu(ids, attention).map_err(to_cli),
        Backend::Gpu => {
            let ctx = gpu()?;
            let weights = model.upload(&ctx).map_err(to_cli)?;
            pollster::block_on(weights.forward(&ctx, ids, attention)).map_err(to_cli)
        }
    }
}

pub fn run(cmd: &ModelCommand) -> Result<(), CliError> {
    match cmd {
        ModelCommand::Info { model } => info(&load(model)?),
        ModelCommand::Embed(args) => super::embed::embed(args),
        ModelCommand::Similarity(args) => super::embed::similarity(args),
        ModelCommand::Tokenize { model, text } => {
            let model = load(model)?;
            for line in tokenize_lines(&tokens(&model, text)?) {
                println!("{line}");
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
        } => attention(
            model,
            text,
            (out, tokens_out.as_deref()),
            *backend,
            (*repeat, *stages),
        ),
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
        } => {
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
            generate(model, text, &opts, chat, *backend)
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
    println!("architecture: {}", i.architecture);
    println!("layers: {}", i.layers);
    println!("heads: {} (key/value heads: {})", i.heads, i.kv_heads);
    println!("hidden: {} (head dim {})", i.hidden, i.head_dim);
    println!("intermediate: {}", i.intermediate);
    println!("vocab: {}", i.vocab);
    println!("max positions: {}", i.max_positions);
    println!(
        "attention: {}",
        if i.causal { "causal" } else { "bidirectional" }
    );
    println!("tokenizer: {}", i.tokenizer);
    for (name, sha) in &i.files {
        println!("file: {name} sha256 {sha}");
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
        let json = super::token_json::to_json(&text.text, &tokens);
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
        println!("{summary}");
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
            println!("{line}");
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
    backend: Backend,
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
                print!("{fresh}");
                let _ = std::io::stdout().flush();
                shown = text;
            }
        }
    };
    let stats = match backend {
        Backend::Cpu => model.generate_cpu(&ids, opts, &mut on_token),
        Backend::Gpu => {
            let ctx = gpu()?;
            let weights = model.upload(&ctx).map_err(to_cli)?;
            pollster::block_on(weights.generate(&ctx, &ids, opts, &mut on_token))
        }
    }
    .map_err(to_cli)?;
    println!();
    let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { f64::INFINITY };
    let after_first = stats.generated.len().saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {:.3} s ({:.1} tokens/s); generation: {} tokens in {:.3} s ({:.2} tokens/s, {}, {backend:?})",
        stats.prompt_tokens,
        stats.prompt_seconds,
        rate(stats.prompt_tokens, stats.prompt_seconds),
        after_first,
        stats.generate_seconds,
        rate(after_first, stats.generate_seconds),
        if opts.use_cache { "KV cache" } else { "no cache" },
    );
    Ok(())
}
