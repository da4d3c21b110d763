//! The command line's grammar, as clap definitions, one file per subcommand. Semantic
//! checks that clap cannot express (conflicting alignments, file contents) live in the
//! command files (`run.rs`, `heatmap.rs`, ...), which take their arguments from here.

mod bench;
mod common;
mod heatmap;
mod help;
mod mha;
mod model;
mod run;

use clap::{Parser, Subcommand};

pub use bench::{BenchArgs, BenchBackend};
pub use common::{Backend, PathArg, PrecisionArg};
pub use heatmap::{GridOrderArg, HeatmapArgs};
pub use mha::MhaArgs;
pub use model::{EmbedArgs, ModelArg, ModelCommand, PatternArgs, SimilarityArgs, TextArg};
pub use run::{AlignArg, RunArgs};

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
            help::outputs_help!(),
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
            help::outputs_help!(),
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
            help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention mha --weights layer.safetensors --x x.npy --heads 8 --causal --out y.npy --attn-weights a.npy"
        )
    )]
    Mha(Box<MhaArgs>),
    /// Attention weights drawn as a heatmap (SVG or PNG): one matrix, or every head as
    /// small multiples.
    #[command(
        after_help = concat!(
            help::outputs_help!(),
            "\n\n",
            "Example:\n  wgpu-attention heatmap --weights A.npy --tokens T.json --layer 0 --head 3 --values --out cat.svg\n  wgpu-attention heatmap --model minilm --text \"The cat sat on the mat\" --layer 0 --head 0 --values --out cat.png\n  wgpu-attention heatmap --weights gpu.npy --diff cpu.npy --layer 0 --head 0 --values --out diff.svg\n  wgpu-attention heatmap --model minilm --text \"The cat sat on the mat\" --grid --order similarity --annotate --out heads.svg"
        )
    )]
    Heatmap(Box<HeatmapArgs>),
    /// Real pretrained models: a Hugging Face BERT directory or a llama-family GGUF file
    /// (`minilm` and `smollm2` name the fetched ones).
    ///
    /// Exit status: 0 on success, 2 on bad input (a missing or malformed file, an empty or
    /// too long text; one line naming the flag), 1 on a device or runtime failure.
    #[command(
        subcommand,
        after_help = "Example:\n  scripts/fetch-models.sh\n  wgpu-attention model next --model smollm2 --text \"The capital of France is\""
    )]
    Model(ModelCommand),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
