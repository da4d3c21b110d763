//! `wgpu-attention model`'s subcommands and their flags.

use std::path::PathBuf;

use wgpu_attention::model::bert::DEFAULT_EMBED_BATCH;

use super::common::Backend;

/// The flags shared by every `model` subcommand.
#[derive(Debug, clap::Args)]
pub struct ModelArg {
    /// A model directory (BERT: config.json, model.safetensors, tokenizer.json) or a .gguf
    /// file (llama family); `minilm` and `smollm2` name the models scripts/fetch-models.sh
    /// fetched.
    #[arg(long, value_name = "PATH")]
    pub model: String,
}

/// `model attention`'s patterns: parts of every layer's attention recomputed on the GPU
/// from its q and k, without the (L, L) matrices (for long texts).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Patterns (GPU; memory O(L) per head, not O(L²))")]
pub struct PatternArgs {
    /// Only these layers, comma-separated (default: all).
    #[arg(long, value_name = "L,L,...", value_parser = parse_indices)]
    pub layers: Option<Indices>,
    /// Only these heads of each layer, comma-separated (default: all).
    #[arg(long, value_name = "H,H,...", value_parser = parse_indices)]
    pub heads: Option<Indices>,
    /// Only the query rows FROM..TO (token positions, TO excluded).
    #[arg(long, value_name = "FROM..TO", value_parser = parse_span)]
    pub rows: Option<std::ops::Range<usize>>,
    /// Only the key columns FROM..TO (token positions, TO excluded).
    #[arg(long, value_name = "FROM..TO", value_parser = parse_span)]
    pub cols: Option<std::ops::Range<usize>>,
    /// Pool the (rows, cols) window into at most P × P cells (P up to 1024), exact:
    /// --out gets each cell's attention mass, the mean over its rows of the weights
    /// summed over its columns (so rows still sum to 1 and `heatmap` draws it, as it
    /// does whole words), float32 (layers, heads, P, P).
    #[arg(long, value_name = "P")]
    pub pool: Option<usize>,
    /// With --pool, also write each cell's largest weight, float32 (layers, heads, P, P).
    #[arg(long, value_name = "M.npy", requires = "pool")]
    pub pool_max_out: Option<PathBuf>,
    /// Write the entropy -Σ w·ln w (nats) of every row of every head, float32 (layers,
    /// heads, rows).
    #[arg(long, value_name = "E.npy")]
    pub entropy: Option<PathBuf>,
}

impl PatternArgs {
    /// Whether any pattern flag was given (else `model attention` writes every weight).
    pub fn any(&self) -> bool {
        self.layers.is_some()
            || self.heads.is_some()
            || self.rows.is_some()
            || self.cols.is_some()
            || self.pool.is_some()
            || self.entropy.is_some()
    }
}

/// Distinct indices, in the order given (one flag value, not a list of values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indices(pub Vec<usize>);

/// `0,3,5`: distinct non-negative integers.
fn parse_indices(s: &str) -> Result<Indices, String> {
    let mut out: Vec<usize> = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let n = part
            .parse::<usize>()
            .map_err(|_| format!("expected comma-separated indices such as 0,3, got {part:?}"))?;
        if out.contains(&n) {
            return Err(format!("{n} is listed twice"));
        }
        out.push(n);
    }
    Ok(Indices(out))
}

/// `FROM..TO` with FROM < TO.
fn parse_span(s: &str) -> Result<std::ops::Range<usize>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected FROM..TO such as 0..64, got {s:?}"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|_| format!("expected FROM..TO such as 0..64, got {s:?}"))
    };
    let (a, b) = (num(a)?, num(b)?);
    if a >= b {
        return Err(format!("FROM must be below TO, got {a}..{b}"));
    }
    Ok(a..b)
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
        /// Where to write the probabilities: float32 (layers, heads, L, L); with the
        /// pattern flags below, what they select (see "Patterns"). `-` is standard output.
        #[arg(long, value_name = "A.npy", required_unless_present = "entropy")]
        out: Option<PathBuf>,
        /// Also write the token strings as a JSON list (special tokens included); with
        /// --pool, one label per pooled row instead (its token range and first token).
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
        #[command(flatten)]
        patterns: PatternArgs,
    },
    /// Attention rollout (Abnar & Zuidema 2020): how much each token draws on each input
    /// token through all layers, as one (L, L) matrix. Each layer's attention A (the mean
    /// over its heads) becomes B = (1 - r)·A + r·I, r the residual weight (0.5: the
    /// identity added and the rows renormalised), and R = B[last] ⋯ B[1]·B[0], the first
    /// layer on the right; computed in float64. Rows sum to 1; a causal model's R is
    /// lower-triangular. `heatmap --weights R.npy` draws it.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention model rollout --model minilm --text \"The cat sat on the mat\" --out R.npy --tokens-out T.json\n  wgpu-attention heatmap --weights R.npy --tokens T.json --values --title \"rollout\" --out rollout.svg"
        )
    )]
    Rollout {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
        /// Where to write the rollout: float32 (L, L); `-` is standard output.
        #[arg(long, value_name = "R.npy")]
        out: PathBuf,
        /// Also write the token strings as a JSON list (special tokens included).
        #[arg(long, value_name = "T.json")]
        tokens_out: Option<PathBuf>,
        /// The weight r of the identity (the residual connection), in [0, 1].
        #[arg(
            long,
            value_name = "R",
            default_value_t = 0.5,
            allow_negative_numbers = true
        )]
        residual: f64,
        /// Where to compute: the GPU kernels or the fast f32 CPU path.
        #[arg(long, value_enum, default_value_t = Backend::Gpu)]
        backend: Backend,
    },
    /// Every head at a glance, one line per layer × head: its mean row entropy (nats,
    /// natural log), its mean attention to the previous token (rows 1..L) and to the first
    /// token, and the nearest other head in any layer by mean Jensen-Shannon distance
    /// (natural log; 0 is identical rows, sqrt(ln 2) ≈ 0.83 the farthest) with that
    /// distance; computed in float64.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention model heads --model minilm --text \"The cat sat on the mat\" --json heads.json"
        )
    )]
    Heads {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        text: TextArg,
        /// Also write the numbers as JSON (the tokens, and one object per layer × head);
        /// `-` is standard output, and the table goes to stderr then.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Where to compute: the GPU kernels or the fast f32 CPU path.
        #[arg(long, value_enum, default_value_t = Backend::Gpu)]
        backend: Backend,
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
        /// Also print the device time of each generated token's pass per stage (q/k/v,
        /// attention, the other projections, the head; summed over layers), averaged
        /// over the tokens after the first, from timestamp queries (GPU backend, on
        /// adapters that have them).
        #[arg(long)]
        stages: bool,
    },
    /// Sentence embeddings (BERT sentence-transformers models): the pooling and
    /// normalisation of the model's modules.json, one float32 row per sentence.
    #[command(
        after_help = "Example:\n  wgpu-attention model embed --model minilm --text \"A cat sleeps\" --text \"A dog runs\" --out E.npy\n  wgpu-attention model embed --model minilm --input sentences.txt --out E.npy --batch 32"
    )]
    Embed(EmbedArgs),
    /// The cosine similarity of two sentences' embeddings (BERT sentence-transformers
    /// models).
    #[command(
        after_help = "Example:\n  wgpu-attention model similarity --model minilm --text \"A cat sleeps\" --text \"A kitten naps\""
    )]
    Similarity(SimilarityArgs),
}

/// `model embed`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("sentences").required(true).args(["text", "input"])))]
pub struct EmbedArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// A sentence to embed; repeat the flag for more (row i of the output is the i-th).
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub text: Vec<String>,
    /// A UTF-8 text file of sentences, one a line (row i of the output is line i + 1).
    #[arg(long, value_name = "FILE.txt", conflicts_with = "text")]
    pub input: Option<PathBuf>,
    /// Where to write the embeddings: float32 (sentences, hidden).
    #[arg(long, value_name = "E.npy")]
    pub out: PathBuf,
    /// Sentences per forward pass at most (GPU), longest first; each pass is padded to
    /// its longest sentence and no token attends to padding. On a CPU adapter (lavapipe)
    /// a batch is cut into passes of similar lengths where that computes fewer rows.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_EMBED_BATCH)]
    pub batch: usize,
    /// Where to compute: the GPU kernels or the fast f32 CPU path.
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    pub backend: Backend,
}

/// `model similarity`.
#[derive(Debug, clap::Args)]
pub struct SimilarityArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// The two sentences to compare: give the flag twice.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true, required = true)]
    pub text: Vec<String>,
    /// Where to compute: the GPU kernels or the fast f32 CPU path.
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    pub backend: Backend,
}
