//! Special files for the tests, made in a temporary folder (the machine's own `/dev` is
//! never used): FIFOs and character devices.

#![cfg(unix)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL in a temp path")
}

pub fn mkfifo(path: &Path) {
    // SAFETY: a valid NUL-terminated path; mkfifo reads it and nothing else.
    let rc = unsafe { libc::mkfifo(c_path(path).as_ptr(), 0o600) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Makes the character device node `major, minor` at `path`, without opening it
/// (creating one needs CAP_MKNOD); says why not otherwise.
pub fn device_node(path: &Path, major: u32, minor: u32) -> Result<(), String> {
    // SAFETY: a valid NUL-terminated path; mknod reads it and nothing else.
    let rc = unsafe {
        libc::mknod(
            c_path(path).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    if rc != 0 {
        return Err(format!(
            "cannot make a device node (needs root): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Makes the character device `major, minor` at `path` and checks it can be opened
/// (creating one needs CAP_MKNOD, opening one a file system mounted without `nodev`);
/// says why not otherwise.
pub fn char_device(path: &Path, major: u32, minor: u32) -> Result<(), String> {
    device_node(path, major, minor)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map(drop)
        .map_err(|e| format!("a device node made here cannot be opened (nodev?): {e}"))
}
