//! The command line's grammar, as clap definitions. Semantic checks that clap cannot
//! express (conflicting alignments, file contents) live in `run.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use wgpu_attention::Window;

/// Transformer attention on any GPU through wgpu, checked against a CPU reference.
///
/// With no subcommand, runs a demo: causal multi-head attention on the default adapter,
/// checked against the CPU reference.
///
/// Exit status: 0 on success, 2 on bad input (a one-line message naming the flag),
/// 1 on a device or runtime failure.
///
/// Adapter choice: WGPU_BACKEND (vulkan, metal, dx12, gl, or a comma list) limits the
/// backends searched, WGPU_ADAPTER_NAME picks the adapter whose name contains it, and
/// WGPU_POWER_PREF (low or high) picks between integrated and discrete GPUs.
#[derive(Debug, Parser)]
#[command(
    name = "wgpu-attention",
    version,
    about,
    long_about,
    disable_help_flag = true,
    after_help = "Example:\n  wgpu-attention info\n  wgpu-attention run --q q.npy --k k.npy --v v.npy --causal --out out.npy"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Print help (-h and --help print the same).
    #[arg(short = 'h', long = "help", action = clap::ArgAction::HelpLong, global = true)]
    pub help: Option<bool>,
    /// No progress on stderr (progress shows only when stderr is a terminal).
    #[arg(long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every adapter found, the one chosen, and the features and limits used.
    ///
    /// The choice follows WGPU_BACKEND (vulkan, metal, dx12, gl, or a comma list),
    /// WGPU_ADAPTER_NAME (a substring of the adapter's name) and WGPU_POWER_PREF (low or
    /// high).
    #[command(
        after_help = "Example:\n  WGPU_BACKEND=vulkan wgpu-attention info\n  wgpu-attention info"
    )]
    Info,
    /// Attention on tensors read from .npy files, written back as f32 .npy files.
    ///
    /// q is (B, Hq, Lq, D), k is (B, Hkv, Lk, D), v is (B, Hkv, Lk, Dv) and out is
    /// (B, Hq, Lq, Dv); Hq must be a multiple of Hkv (grouped-query attention). Float inputs
    /// may be f32, f64 or f16 and are converted to f32; Fortran-ordered arrays are accepted.
    ///
    /// Exit status: 0 on success, 2 on bad input (a one-line message naming the flag), 1 on
    /// a device or runtime failure (no adapter, device error, f16 unsupported).
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention run --q q.npy --k k.npy --v v.npy --causal --window 128,0 --out out.npy --lse lse.npy"
        )
    )]
    Run(Box<RunArgs>),
    /// Median time, GFLOP/s and peak device memory of one shape, on random normal inputs.
    ///
    /// FLOPs count 2 * B * Hq * (D + Dv) per allowed (query, key) pair. GPU time comes
    /// from timestamp queries where the adapter has them (wall time otherwise, said so);
    /// transfers are reported apart. The first GPU call compiles and tunes and is not
    /// timed.
    ///
    /// Exit status: 0 on success, 2 on bad input (a one-line message naming the flag), 1 on
    /// a device or runtime failure.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention bench --shape 1,8,1024,1024,64 --causal --backend both --iters 5"
        )
    )]
    Bench(BenchArgs),
    /// Multi-head attention with projections, as PyTorch's nn.MultiheadAttention
    /// (batch_first=True), with weights from a .safetensors state dict.
    ///
    /// Weight names: in_proj_weight (E + 2*N*E/H, E) and in_proj_bias, or q_proj_weight
    /// (E, E), k_proj_weight and v_proj_weight (N*E/H, Ekv); out_proj.weight (E, E) and
    /// out_proj.bias (E). N is --kv-heads (default H). Missing biases are zero. A query
    /// whose keys are all padded gets zero attention (y is out_proj.bias there), where
    /// PyTorch gives NaN.
    ///
    /// Exit status: 0 on success, 2 on bad input (a one-line message naming the flag), 1 on
    /// a device or runtime failure.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention mha --weights layer.safetensors --x x.npy --heads 8 --causal --out y.npy --attn-weights a.npy"
        )
    )]
    Mha(Box<MhaArgs>),
    /// Attention weights drawn as a heatmap (SVG or PNG): one matrix, or every head as
    /// small multiples.
    #[command(
        after_help = concat!(
            super::help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention heatmap --weights A.npy --tokens T.json --layer 0 --head 3 --values --out cat.svg\n  wgpu-attention heatmap --model minilm --text \"The cat sat on the mat\" --layer 0 --head 0 --values --out cat.png"
        )
    )]
    Heatmap(Box<super::heatmap::HeatmapArgs>),
    /// Real pretrained models: a Hugging Face BERT directory or a llama-family GGUF file
    /// (`minilm` and `smollm2` name the fetched ones).
    ///
    /// Exit status: 0 on success, 2 on bad input (a missing or malformed file, an empty or
    /// too long text; one line naming the flag), 1 on a device or runtime failure.
    #[command(
        subcommand,
        after_help = "Example:\n  scripts/fetch-models.sh\n  wgpu-attention model next --model smollm2 --text \"The capital of France is\""
    )]
    Model(super::model::ModelCommand),
}

/// The flags of `wgpu-attention mha`.
#[derive(Debug, clap::Args)]
pub struct MhaArgs {
    /// The layer's weights: a .safetensors file with PyTorch's state_dict names.
    #[arg(long, value_name = "W.safetensors")]
    pub weights: PathBuf,
    /// Queries (and keys and values for self-attention), (B, L, E).
    #[arg(long = "x", value_name = "X.npy")]
    pub x: PathBuf,
    /// Keys and values for cross-attention, (B, S, Ekv).
    #[arg(long = "kv", value_name = "KV.npy")]
    pub kv: Option<PathBuf>,
    /// Query heads H; must divide E.
    #[arg(long, value_name = "H")]
    pub heads: usize,
    /// Key/value heads N (grouped-query); must divide H. Default H.
    #[arg(long, value_name = "N")]
    pub kv_heads: Option<usize>,
    /// Query i sees keys j <= i (top-left over (L, S)).
    #[arg(long)]
    pub causal: bool,
    /// (B, S), bool or integer: true (nonzero) = this key is padding and is ignored
    /// (PyTorch's polarity).
    #[arg(long, value_name = "M.npy")]
    pub key_padding_mask: Option<PathBuf>,
    /// Feed X one token at a time through a KV cache on the GPU (self-attention, causal
    /// implied); the result equals the full causal run.
    #[arg(long, conflicts_with = "kv")]
    pub incremental: bool,
    /// Where to write y, (B, L, E), f32 (`-`: standard output).
    #[arg(long = "out", value_name = "Y.npy")]
    pub out: PathBuf,
    /// Also write the attention weights, (B, L, S) averaged over heads, f32.
    #[arg(long, value_name = "A.npy")]
    pub attn_weights: Option<PathBuf>,
    /// Write weights per head, (B, H, L, S), instead of their mean.
    #[arg(long, requires = "attn_weights")]
    pub per_head_weights: bool,
    /// Where to compute: the GPU kernels or the CPU reference (f64).
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    pub backend: Backend,
    /// Prefix of the layer's tensor names in the weights file, e.g.
    /// encoder.layers.0.self_attn. for a whole model's state dict.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// Say on stderr which adapter and kernel path ran, and how long it took.
    #[arg(long)]
    pub verbose: bool,
}

/// The flags of `wgpu-attention bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// B,H,LQ,LK,D: batch, query heads, query and key lengths, head dim.
    #[arg(long, value_name = "B,H,LQ,LK,D", value_parser = parse_shape)]
    pub shape: [usize; 5],
    /// Key/value heads (grouped-query attention); default H.
    #[arg(long, value_name = "N")]
    pub hkv: Option<usize>,
    /// Value head dim; default D.
    #[arg(long, value_name = "N")]
    pub dv: Option<usize>,
    /// Causal (top-left) masking; FLOPs count only the allowed pairs.
    #[arg(long)]
    pub causal: bool,
    /// What to measure: the GPU, the fast CPU path (f32 flash attention), or both.
    #[arg(long, value_enum, default_value_t = BenchBackend::Gpu)]
    pub backend: BenchBackend,
    /// GPU kernel path; auto reports the path it chose.
    #[arg(long, value_enum, default_value_t = PathArg::Auto)]
    pub path: PathArg,
    /// Storage precision of q, k, v on the GPU (f16 needs the adapter's shader-f16).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// Timed runs (the median is reported).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub iters: usize,
    /// One JSON object per line instead of a table, to stdout or to FILE.
    #[arg(
        long,
        value_name = "FILE",
        num_args = 0..=1,
        default_missing_value = "-"
    )]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    Gpu,
    Cpu,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PathArg {
    Auto,
    Staged,
    Fused,
    Decode,
}

/// The flags of `wgpu-attention run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Queries, (B, Hq, Lq, D).
    #[arg(long = "q", value_name = "Q.npy")]
    pub q: PathBuf,
    /// Keys, (B, Hkv, Lk, D).
    #[arg(long = "k", value_name = "K.npy")]
    pub k: PathBuf,
    /// Values, (B, Hkv, Lk, Dv).
    #[arg(long = "v", value_name = "V.npy")]
    pub v: PathBuf,
    /// Where to write the output, (B, Hq, Lq, Dv), f32 (`-`: standard output).
    #[arg(long = "out", value_name = "OUT.npy")]
    pub out: PathBuf,
    /// Bool (true = may attend) or float additive mask (-inf forbids), rank 2 to 4,
    /// broadcastable to (B, Hq, Lq, Lk).
    #[arg(long, value_name = "M.npy")]
    pub mask: Option<PathBuf>,
    /// Forbid keys after each query's position (top-left alignment unless --align says
    /// otherwise).
    #[arg(long)]
    pub causal: bool,
    /// Same as --causal --align bottom-right.
    #[arg(long)]
    pub causal_bottom_right: bool,
    /// Query position p(i): i (top-left, the default) or i + Lk - Lq (bottom-right). Used by
    /// --causal and --window.
    #[arg(long, value_enum, value_name = "ALIGN")]
    pub align: Option<AlignArg>,
    /// Sliding window: key j is allowed when p(i) - LEFT <= j <= p(i) + RIGHT. -1 on a side
    /// means unbounded on that side (FlashAttention's convention), e.g. --window 128,0.
    #[arg(long, value_name = "LEFT,RIGHT", allow_hyphen_values = true, value_parser = parse_window)]
    pub window: Option<Window>,
    /// Valid keys per batch (key padding): int32 or int64, shape (B,), each 0..=Lk.
    #[arg(long, value_name = "LENS.npy")]
    pub kv_lens: Option<PathBuf>,
    /// Multiplies q·k; default 1/sqrt(D). Must be finite (negative values are allowed).
    #[arg(long, value_name = "S", allow_hyphen_values = true)]
    pub scale: Option<f32>,
    /// Also write the softmax weights, (B, Hq, Lq, Lk), f32.
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Also write the natural-log log-sum-exp of each row, (B, Hq, Lq), f32.
    #[arg(long, value_name = "L.npy")]
    pub lse: Option<PathBuf>,
    /// Where to compute: the GPU kernels or the CPU (f32 flash attention on every core).
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    pub backend: Backend,
    /// Storage precision of q, k, v. f16 on the GPU needs the adapter's shader-f16; on the
    /// CPU it rounds q, k and v to f16 before the CPU path runs.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// GPU kernel path; auto picks one per call.
    #[arg(long, value_enum, default_value_t = PathArg::Auto)]
    pub path: PathArg,
    /// Say on stderr which adapter and kernel path ran, and how long it took.
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlignArg {
    TopLeft,
    BottomRight,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Gpu,
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    F32,
    F16,
}

/// `B,H,LQ,LK,D`: five positive integers.
fn parse_shape(s: &str) -> Result<[usize; 5], String> {
    let dims: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("expected five positive integers B,H,LQ,LK,D, got {s:?}"))?;
    let dims: [usize; 5] = dims
        .try_into()
        .map_err(|_| format!("expected five positive integers B,H,LQ,LK,D, got {s:?}"))?;
    if dims.contains(&0) {
        return Err(format!("every dimension must be positive, got {s:?}"));
    }
    Ok(dims)
}

/// `LEFT,RIGHT`, each a non-negative integer or -1 for unbounded.
fn parse_window(s: &str) -> Result<Window, String> {
    let (left, right) = s
        .split_once(',')
        .ok_or_else(|| format!("expected two integers LEFT,RIGHT, got {s:?}"))?;
    Ok(Window {
        left: parse_side("LEFT", left)?,
        right: parse_side("RIGHT", right)?,
    })
}

fn parse_side(name: &str, s: &str) -> Result<Option<u32>, String> {
    let s = s.trim();
    match s.parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) => u32::try_from(n).map(Some).map_err(|_| {
            format!(
                "{name} must be -1 (unbounded) or between 0 and {}, got {n}",
                u32::MAX
            )
        }),
        Err(_) => Err(format!("{name} must be an integer, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sides() {
        assert_eq!(parse_window("3,0"), Ok(Window::new(3, 0)));
        assert_eq!(
            parse_window("-1, 2"),
            Ok(Window {
                left: None,
                right: Some(2)
            })
        );
        assert!(parse_window("-2,0").is_err());
        assert!(parse_window("3").is_err());
        assert!(parse_window("a,1").is_err());
        assert!(parse_window("1,2,3").is_err());
    }

    #[test]
    fn grammar_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
