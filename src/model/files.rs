//! Reading model files whole, with a size bound checked before reading, and their hashes.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::ModelError;

/// Reads `path` whole, refusing a file above `limit` bytes (checked against the file's
/// size first, and again while reading, in case it grows).
///
/// # Errors
/// [`ModelError::Io`] naming the path when it is missing, unreadable or above the limit.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ModelError> {
    let io = |detail: String| ModelError::Io {
        path: path.display().to_string(),
        detail,
    };
    let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
    let meta = file.metadata().map_err(|e| io(e.to_string()))?;
    if !meta.is_file() {
        return Err(io("not a regular file".into()));
    }
    let too_big = || io(format!("larger than the {limit}-byte limit for this file"));
    if meta.len() > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(bytes)
}

/// The sha256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
