//! Reading an input file only after its header has said how long it must be.
//!
//! A path that is not a regular file (`/dev/zero`, a FIFO, a directory) is refused
//! before reading, and so is a file that holds more or fewer bytes than its header
//! promises: nothing is read whole, and nothing is allocated, on the strength of a file
//! that cannot be what it claims. The buffer for the whole file is reserved fallibly.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use wgpu_attention::model::{check_promised_len, open_regular_file};

use super::super::exit::CliError;

/// Opens the input file `path` given as `flag`: a regular file (links followed), never a
/// FIFO, device or folder, which are refused without waiting and without opening a device
/// (`wgpu_attention::model::open_regular_file`).
///
/// # Errors
/// [`CliError::Input`] naming `flag` and the path.
pub fn open_input(flag: &'static str, path: &Path) -> Result<(File, u64), CliError> {
    open_regular_file(path).map_err(|e| {
        let shown = path.display();
        if e.kind() == std::io::ErrorKind::InvalidInput {
            CliError::input(flag, format!("{shown}: {e}"))
        } else {
            CliError::input(flag, format!("cannot read {shown}: {e}"))
        }
    })
}

/// Reads `path` whole, once `promised` has read its header (from a reader bounded by
/// the file's length) and returned the file length the header promises, in bytes.
/// `promised` returns a message for a header it cannot accept.
///
/// # Errors
/// [`CliError::Input`] naming `flag`: the path cannot be opened, is not a regular file,
/// has a bad header, or holds more or fewer bytes than promised; or there is not memory
/// for it.
pub fn read_bounded(
    flag: &'static str,
    path: &Path,
    promised: impl FnOnce(&mut dyn Read) -> Result<u64, String>,
) -> Result<Vec<u8>, CliError> {
    let shown = path.display();
    let fail = |msg: String| CliError::input(flag, format!("{shown}: {msg}"));
    let (file, len) = open_input(flag, path)?;
    check_promised_len(&file, len, promised).map_err(fail)?;
    let mut bytes = Vec::new();
    let size = usize::try_from(len).map_err(|_| fail(format!("{len} bytes is too large")))?;
    bytes
        .try_reserve_exact(size)
        .map_err(|_| fail(format!("not enough memory to read its {len} bytes")))?;
    let mut file = &file;
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.take(len.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(|e| CliError::input(flag, format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 != len {
        return Err(fail("the file changed while it was read".into()));
    }
    Ok(bytes)
}
