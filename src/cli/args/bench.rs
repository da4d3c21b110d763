//! `wgpu-attention bench`'s flags.

use std::path::PathBuf;

use clap::ValueEnum;

use super::common::{PathArg, PrecisionArg};

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
