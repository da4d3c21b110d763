//! Reading model files whole, with a size bound checked before reading, and their hashes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::ModelError;

/// Opens `path` (links followed) for reading if it is a regular file, and returns it with
/// its length. A FIFO, a device, a socket or a folder is refused as `InvalidInput` ("not a
/// regular file"), and never waited on: the type is looked at before opening, so a device
/// is never opened (opening one can have effects) and a FIFO never waits for a writer; on
/// Unix the open is also non-blocking and the opened file's own type is checked again, so
/// a path swapped for a FIFO in between cannot make the open wait either. The command line
/// reads every input file through this too.
///
/// # Errors
/// The path's own error when it cannot be looked at or opened; `InvalidInput` when it
/// is not a regular file.
pub fn open_regular_file(path: &Path) -> io::Result<(File, u64)> {
    let not_regular = || io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    Ok((file, meta.len()))
}

/// Reads `path` whole, refusing a file above `limit` bytes (checked against the file's
/// size first, and again while reading, in case it grows) and a path that is not a
/// regular file ([`open_regular_file`]).
///
/// # Errors
/// [`ModelError::Io`] naming the path when it is missing, unreadable, not a regular file
/// or above the limit.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ModelError> {
    let (file, len) = open_within(path, limit)?;
    read_whole(path, file, len, limit)
}

/// Reads the `.safetensors` file `path` whole as [`read_bounded`] does, once its header
/// has said how long the file must be ([`safetensors_len`]): a file longer or shorter than
/// that (a truncated download, or gigabytes behind a small header) is refused before its
/// data is read.
///
/// # Errors
/// As [`read_bounded`]; [`ModelError::Format`] naming the path for a malformed header or
/// a length other than the header's.
pub(crate) fn read_safetensors(path: &Path, limit: u64) -> Result<Vec<u8>, ModelError> {
    let (mut file, len) = open_within(path, limit)?;
    let format = |detail: String| ModelError::Format {
        what: path.display().to_string(),
        detail,
    };
    check_promised_len(&file, len, safetensors_len).map_err(format)?;
    file.seek(io::SeekFrom::Start(0))
        .map_err(|e| io_error(path, e.to_string()))?;
    read_whole(path, file, len, limit)
}

/// [`open_regular_file`], refusing a file above `limit` bytes.
fn open_within(path: &Path, limit: u64) -> Result<(File, u64), ModelError> {
    let (file, len) = open_regular_file(path).map_err(|e| io_error(path, e.to_string()))?;
    if len > limit {
        return Err(too_big(path, limit));
    }
    Ok((file, len))
}

/// The rest of `file` (`len` bytes by its size), at most `limit`.
fn read_whole(path: &Path, file: File, len: u64, limit: u64) -> Result<Vec<u8>, ModelError> {
    let no_memory = || io_error(path, format!("not enough memory to read its {len} bytes"));
    let mut bytes = Vec::new();
    let size = usize::try_from(len).map_err(|_| no_memory())?;
    bytes.try_reserve_exact(size).map_err(|_| no_memory())?;
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(path, limit));
    }
    Ok(bytes)
}

fn io_error(path: &Path, detail: String) -> ModelError {
    ModelError::Io {
        path: path.display().to_string(),
        detail,
    }
}

fn too_big(path: &Path, limit: u64) -> ModelError {
    io_error(
        path,
        format!("larger than the {limit}-byte limit for this file"),
    )
}

/// Reads a file's header through `promised` (from a reader bounded by the file's length
/// `len`), which returns the length that header promises, and refuses a file that holds
/// more or fewer bytes, naming both. The model loaders and the command line's `.npy` and
/// `.safetensors` inputs share this check. Leaves the file's position past the header.
///
/// # Errors
/// `promised`'s message for a header it cannot accept, or the lengths that differ.
pub fn check_promised_len(
    file: &File,
    len: u64,
    promised: impl FnOnce(&mut dyn Read) -> Result<u64, String>,
) -> Result<(), String> {
    let want = promised(&mut io::BufReader::new(file).take(len))?;
    if want != len {
        let (more, n) = if len > want {
            ("more", len - want)
        } else {
            ("fewer", want - len)
        };
        return Err(format!(
            "the file holds {len} bytes, {n} {more} than the {want} its header promises"
        ));
    }
    Ok(())
}

/// The length a `.safetensors` file's header promises: 8 bytes of header size, the JSON
/// header, and the data up to the largest end offset of any tensor. Reads only the header
/// from `r`. The command line checks its own `.safetensors` inputs with this too.
///
/// # Errors
/// A message for a header that is cut short, too large (over safetensors' own 100 MB
/// limit), not JSON, or has a tensor without `data_offsets`.
pub fn safetensors_len(r: &mut dyn Read) -> Result<u64, String> {
    // safetensors' own limit on the header (MAX_HEADER_SIZE).
    const MAX_HEADER: u64 = 100_000_000;
    let size = read_header_bytes(r, 8, "the header size")?;
    let n = u64::from_le_bytes(size.try_into().unwrap_or_default());
    if n > MAX_HEADER {
        return Err(format!(
            "not a valid safetensors file: a header of {n} bytes (at most {MAX_HEADER})"
        ));
    }
    let header = read_header_bytes(r, n, "the header")?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| format!("not a valid safetensors file: header: {e}"))?;
    let tensors = json
        .as_object()
        .ok_or("not a valid safetensors file: the header is not a JSON object")?;
    let mut end = 0u64;
    for (name, info) in tensors.iter().filter(|(name, _)| *name != "__metadata__") {
        let offsets = info.get("data_offsets").and_then(|o| o.as_array());
        let stop = offsets
            .and_then(|o| o.get(1))
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("not a valid safetensors file: {name} has no data_offsets"))?;
        end = end.max(stop);
    }
    Ok(8u64.saturating_add(n).saturating_add(end))
}

/// Exactly `n` bytes of a header from `r` (`what` names them in the message), refusing a
/// file that ends first.
///
/// # Errors
/// A message for a read that fails or a file that ends inside them.
pub fn read_header_bytes(r: &mut dyn Read, n: u64, what: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    r.take(n)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read {what}: {e}"))?;
    if (buf.len() as u64) < n {
        return Err(format!("the file ends inside {what}"));
    }
    Ok(buf)
}

/// The sha256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
