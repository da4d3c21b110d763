//! The one error type every fallible call returns.

use thiserror::Error;

/// Everything that can go wrong, split so callers can tell their own mistakes
/// (bad shapes, bad options) from failures of the device they run on.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum AttentionError {
    /// An input tensor has a shape that does not fit the others.
    /// `arg` names the argument (`q`, `k`, `v`, `mask`, `kv_lens`, ...).
    #[error("{arg}: {detail}")]
    Shape { arg: &'static str, detail: String },

    /// An option has a value the computation cannot use.
    #[error("{arg}: {detail}")]
    InvalidOption { arg: &'static str, detail: String },

    /// The problem is valid but larger than this device (or this library) can run.
    #[error("{arg}: too large for this device: {detail}")]
    TooLarge { arg: &'static str, detail: String },

    /// The adapter lacks a feature the request needs (for example `shader-f16`).
    #[error("unsupported on this adapter: {0}")]
    Unsupported(String),

    /// No GPU adapter could be found or opened.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),

    /// The device reported an error (validation, out of memory, lost) while running.
    #[error("device error: {0}")]
    Device(String),
}

impl AttentionError {
    /// True for errors caused by the caller's input (shapes, options, sizes);
    /// false for errors of the device or the environment.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::Shape { .. } | Self::InvalidOption { .. } | Self::TooLarge { .. }
        )
    }

    pub(crate) fn shape(arg: &'static str, detail: impl Into<String>) -> Self {
        Self::Shape {
            arg,
            detail: detail.into(),
        }
    }

    pub(crate) fn option(arg: &'static str, detail: impl Into<String>) -> Self {
        Self::InvalidOption {
            arg,
            detail: detail.into(),
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = AttentionError> = std::result::Result<T, E>;
