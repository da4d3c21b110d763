//! `wgpu-attention run`'s flags.

use std::path::PathBuf;

use clap::ValueEnum;
use wgpu_attention::Window;

use super::common::{Backend, PathArg, PrecisionArg};

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
}
