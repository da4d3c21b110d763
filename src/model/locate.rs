//! Where fetched models live, and what the names `minilm` and `smollm2` stand for.

use std::path::PathBuf;

use super::ModelError;

/// The cache `scripts/fetch-models.sh` fills: `$WGPU_ATTENTION_MODELS`, else
/// `$XDG_CACHE_HOME/wgpu-attention/models`, else `~/.cache/wgpu-attention/models`.
pub fn model_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WGPU_ATTENTION_MODELS") {
        return Some(PathBuf::from(dir));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("wgpu-attention").join("models"))
}

/// A model argument as a path: `minilm` and `smollm2` name the fetched models (an error
/// says to run the fetch script when they are absent); anything else is a path.
pub fn resolve_model_path(arg: &str) -> Result<PathBuf, ModelError> {
    let fetched = match arg {
        "minilm" => Some("minilm/model"),
        "smollm2" => Some("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        _ => None,
    };
    let Some(rel) = fetched else {
        return Ok(PathBuf::from(arg));
    };
    let path = model_cache_dir().map(|dir| dir.join(rel));
    match path {
        Some(path) if path.exists() => Ok(path),
        _ => Err(ModelError::input(
            "--model",
            format!("{arg} is not fetched: run scripts/fetch-models.sh"),
        )),
    }
}
