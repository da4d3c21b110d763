//! Reading model files whole, with a size bound checked before reading, and their hashes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
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
    let io = |detail: String| ModelError::Io {
        path: path.display().to_string(),
        detail,
    };
    let (file, len) = open_regular_file(path).map_err(|e| io(e.to_string()))?;
    let too_big = || io(format!("larger than the {limit}-byte limit for this file"));
    if len > limit {
        return Err(too_big());
    }
    let no_memory = || io(format!("not enough memory to read its {len} bytes"));
    let mut bytes = Vec::new();
    let size = usize::try_from(len).map_err(|_| no_memory())?;
    bytes.try_reserve_exact(size).map_err(|_| no_memory())?;
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
