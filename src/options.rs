//! What a call computes: the options struct and its enums, with documented defaults.

use ndarray::ArrayViewD;

/// Where query row `i` sits among the keys, for causal masks and windows.
///
/// Query position `p(i)` is `i` for [`Alignment::TopLeft`] and `i + Lk - Lq` for
/// [`Alignment::BottomRight`]. The two agree when `Lq == Lk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alignment {
    /// `p(i) = i`: PyTorch's and JAX's `is_causal`. The default.
    #[default]
    TopLeft,
    /// `p(i) = i + Lk - Lq`: FlashAttention 2.1+, decoding against a KV cache.
    BottomRight,
}

/// A sliding window around each query's position: key `j` is allowed when
/// `p(i) - left <= j <= p(i) + right`. `None` on a side means unbounded on that side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    pub left: Option<u32>,
    pub right: Option<u32>,
}

impl Window {
    /// A window reaching `left` keys back and `right` keys ahead.
    pub fn new(left: u32, right: u32) -> Self {
        Self {
            left: Some(left),
            right: Some(right),
        }
    }
}

/// An explicit mask, broadcastable by NumPy's rules to `(B, Hq, Lq, Lk)`, rank 2 to 4.
#[derive(Debug, Clone)]
pub enum Mask<'a> {
    /// `true` = may attend (PyTorch's and JAX's polarity).
    Bool(ArrayViewD<'a, bool>),
    /// Added to the scaled logits; `-inf` forbids a pair.
    Additive(ArrayViewD<'a, f32>),
}

/// How numbers are stored on the device. Accumulation and softmax are f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 storage. The default.
    #[default]
    F32,
    /// f16 storage for q, k, v (needs the adapter's `shader-f16`), on the fused and
    /// decode paths; outputs stay f32. Host arrays are uploaded as f16; f32 device
    /// tensors are converted on the device first.
    F16,
}

/// Which GPU kernels run the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelPath {
    /// Pick automatically. The default: [`KernelPath::Decode`] for at most 16 queries
    /// against at least 1024 keys; otherwise [`KernelPath::Fused`], or `Staged` when D or
    /// Dv exceeds 256. Asking for weights does not change the choice.
    #[default]
    Auto,
    /// Three kernels: Q·Kᵀ, fused scale+mask+softmax, weights·V. Always available
    /// (any D) in f32.
    Staged,
    /// One fused flash-attention kernel (online softmax, no score matrix; device memory
    /// O(B·H·L·D)). D and Dv up to 256. Weights, when asked for, are recomputed by a
    /// separate pass (the logits into the weights output, then a softmax there), so the
    /// output kernel never holds a score matrix.
    Fused,
    /// Split-KV decoding for short queries against long key sequences: key ranges in
    /// parallel, then a combine pass. D and Dv up to 256; weights are recomputed as on the
    /// fused path.
    Decode,
}

/// Which kernel serves the fused path (and the fused kernel's share of split-KV), set per
/// context with [`crate::GpuContext::set_fused_kernel`] or natively with
/// `WGPU_ATTENTION_KERNEL=rows|tiled|lanes|auto` in the environment. Results are the same
/// either way; only speed differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FusedKernel {
    /// The tuner's choice among both kernels (the adapter type's preferred order when
    /// tuning is off). The default.
    #[default]
    Auto,
    /// `fused.wgsl`: each invocation owns whole query rows.
    Rows,
    /// `fused_tiled.wgsl`: GEMM micro-tiles over a 64-row block. Where no tiled
    /// configuration fits the device (workgroup memory), the row kernel serves.
    Tiled,
    /// `fused_lanes.wgsl`: one subgroup per workgroup, keys shared across lanes by
    /// subgroup broadcasts, for adapters whose subgroups are a CPU's SIMD lanes (a fixed
    /// subgroup size of 8: Mesa 22's lavapipe, the driver that compiles it quickly; D and
    /// Dv up to 128). Where it does not fit, the
    /// other kernels serve.
    Lanes,
}

impl FusedKernel {
    /// The kernel a name stands for: `auto`, `rows`, `tiled` or `lanes` (the names of
    /// `WGPU_ATTENTION_KERNEL`); `None` for any other name.
    ///
    /// ```
    /// use wgpu_attention::FusedKernel;
    /// assert_eq!(FusedKernel::from_name("tiled"), Some(FusedKernel::Tiled));
    /// assert_eq!(FusedKernel::from_name("subgroup-decode"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim() {
            "auto" => Some(FusedKernel::Auto),
            "rows" => Some(FusedKernel::Rows),
            "tiled" => Some(FusedKernel::Tiled),
            "lanes" => Some(FusedKernel::Lanes),
            _ => None,
        }
    }

    /// The choice named among the comma-separated names of `WGPU_ATTENTION_KERNEL`
    /// (which may also name `subgroup-decode`, for the decode path), `Auto` when unset or
    /// none names a fused kernel.
    pub(crate) fn from_env() -> Self {
        kernel_env_names()
            .iter()
            .find_map(|n| Self::from_name(n))
            .unwrap_or(FusedKernel::Auto)
    }
}

/// The comma-separated names of `WGPU_ATTENTION_KERNEL`, trimmed; none when it is unset.
/// Besides a fused kernel's name, the list may hold `subgroup-decode` (the decode path's
/// subgroup kernel) and `split-products` (few-row products splitting K across lanes).
pub(crate) fn kernel_env_names() -> Vec<String> {
    std::env::var("WGPU_ATTENTION_KERNEL")
        .unwrap_or_default()
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Every option of a call, with the defaults of PyTorch's `scaled_dot_product_attention`.
///
/// ```
/// use wgpu_attention::{AttentionOptions, Alignment};
/// let opts = AttentionOptions { causal: true, alignment: Alignment::BottomRight, ..Default::default() };
/// assert_eq!(opts.scale, None); // 1/sqrt(D)
/// ```
#[derive(Debug, Clone, Default)]
pub struct AttentionOptions<'a> {
    /// Multiplies `q·k`. `None` (the default) means `1/sqrt(D)`.
    pub scale: Option<f32>,
    /// Forbid keys after the query's position `p(i)`. Default `false`.
    pub causal: bool,
    /// How `p(i)` is computed for `causal` and `window`. Default [`Alignment::TopLeft`].
    pub alignment: Alignment,
    /// Sliding window around `p(i)`. Default none.
    pub window: Option<Window>,
    /// Explicit boolean or additive mask. Default none.
    pub mask: Option<Mask<'a>>,
    /// Number of valid keys per batch (key padding), length `B`. Default: all `Lk`.
    pub kv_lens: Option<&'a [u32]>,
    /// Also return the softmax weights `(B, Hq, Lq, Lk)`. Default `false`.
    pub return_weights: bool,
    /// Also return the log-sum-exp `(B, Hq, Lq)`. Default `false`.
    pub return_lse: bool,
    /// Storage precision on the device. Default [`Precision::F32`].
    pub precision: Precision,
    /// Kernel choice. Default [`KernelPath::Auto`].
    pub path: KernelPath,
}
