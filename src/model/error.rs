//! The error every model call returns.

use thiserror::Error;

use crate::AttentionError;

/// What can go wrong loading or running a model. The command line maps
/// [`ModelError::is_input_error`] to exit code 2 and the rest to 1.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    /// A model file is missing or cannot be read.
    #[error("{path}: {detail}")]
    Io { path: String, detail: String },

    /// A model file is malformed (bad header, missing tensor, wrong shape).
    #[error("{what}: {detail}")]
    Format { what: String, detail: String },

    /// The file is well formed but uses something this crate does not run
    /// (a tensor type, an architecture).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A bad argument to a model call (empty text, too many tokens, a bad sampling option).
    #[error("{arg}: {detail}")]
    Input { arg: &'static str, detail: String },

    /// The attention layer or the device failed.
    #[error(transparent)]
    Attention(#[from] AttentionError),
}

impl ModelError {
    /// True when the caller's input (a file, a path, text, an option) is at fault.
    pub fn is_input_error(&self) -> bool {
        match self {
            Self::Io { .. } | Self::Format { .. } | Self::Unsupported(_) | Self::Input { .. } => {
                true
            }
            Self::Attention(e) => e.is_input_error(),
        }
    }

    pub(crate) fn input(arg: &'static str, detail: impl Into<String>) -> Self {
        Self::Input {
            arg,
            detail: detail.into(),
        }
    }

    pub(crate) fn format(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Format {
            what: what.into(),
            detail: detail.into(),
        }
    }
}
