//! `wgpu-attention mha`'s flags.

use std::path::PathBuf;

use super::common::Backend;

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
