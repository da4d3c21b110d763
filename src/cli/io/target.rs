//! Where an output path leads, decided before any work.
//!
//! `-` is standard output. A symbolic link is followed, so its target receives the
//! result and the link stays a link; a dangling link has its target created, as shell
//! redirection and `numpy.save` do. What the path finally names decides how it is written:
//! a regular file (or none yet) is replaced whole by a renamed temporary file; a character
//! device or FIFO is opened and written in place, never replaced. Folders, block devices,
//! sockets and paths whose folder does not exist are refused.

use std::fs::Metadata;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// How many links are followed before a path is called a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// What an output path leads to.
#[derive(Debug)]
pub enum Target {
    /// A regular file at `path` (a link's final target), or nothing yet: written to a
    /// temporary file in `path`'s folder and renamed over `path`.
    File {
        path: PathBuf,
        /// The file being replaced, whose permissions the new one keeps.
        existing: Option<Metadata>,
    },
    /// Standard output.
    Stdout,
    /// A character device or a FIFO, opened through `path` and written in place.
    Stream { path: PathBuf, kind: &'static str },
}

/// What makes two outputs one file: the device and inode of a file that exists, the
/// canonical folder and name of one that does not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Node(u64, u64),
    Path(PathBuf),
}

/// Resolves and classifies `path`, or says why it cannot be an output.
pub fn resolve(path: &Path) -> Result<(Target, Identity), String> {
    if path.as_os_str() == "-" {
        return Ok((Target::Stdout, stdout_identity()?));
    }
    if ends_in_separator(path) {
        return Err("the path names a folder".into());
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => new_file(path, path),
        Err(e) => Err(e.to_string()),
        Ok(_) => match std::fs::metadata(path) {
            // A link whose target does not exist (yet).
            Err(e) if e.kind() == ErrorKind::NotFound => new_file(path, &follow(path)?),
            // A loop of links says so; anything else as the system words it.
            Err(e) => Err(follow(path).err().unwrap_or_else(|| e.to_string())),
            Ok(meta) => existing(path, meta),
        },
    }
}

/// A path that exists, after links: its kind decides.
fn existing(path: &Path, meta: Metadata) -> Result<(Target, Identity), String> {
    let identity = node_identity(&meta).map_or_else(
        || {
            path.canonicalize()
                .map(Identity::Path)
                .map_err(|e| e.to_string())
        },
        Ok,
    )?;
    if meta.is_file() {
        // The final target, so the rename replaces it and not a link on the way.
        let real = path
            .canonicalize()
            .map_err(|e| format!("cannot resolve it: {e}"))?;
        return Ok((
            Target::File {
                path: real,
                existing: Some(meta),
            },
            identity,
        ));
    }
    if meta.is_dir() {
        return Err("it is a folder".into());
    }
    match special_kind(&meta) {
        Special::Stream(kind) => Ok((
            Target::Stream {
                path: path.to_path_buf(),
                kind,
            },
            identity,
        )),
        Special::Refused(why) => Err(why.into()),
    }
}

/// A file to create at `target` (the path itself, or a dangling link's target).
fn new_file(path: &Path, target: &Path) -> Result<(Target, Identity), String> {
    let name = target
        .file_name()
        .ok_or_else(|| "the path names no file".to_string())?;
    let dir = folder_of(target);
    let via = if target == path {
        String::new()
    } else {
        format!(" (the link's target {})", target.display())
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a folder{via}", dir.display())),
        Err(_) => return Err(format!("folder {} does not exist{via}", dir.display())),
    }
    let canonical = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve folder {}: {e}", dir.display()))?
        .join(name);
    Ok((
        Target::File {
            path: target.to_path_buf(),
            existing: None,
        },
        Identity::Path(canonical),
    ))
}

/// The folder a file path lies in (`.` for a bare name).
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Follows a chain of links to the first path that is not one.
fn follow(path: &Path) -> Result<PathBuf, String> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&at).map_err(|e| e.to_string())?;
                at = folder_of(&at).join(to);
            }
            _ => return Ok(at),
        }
    }
    Err(format!("more than {MAX_LINKS} links in a row (a loop?)"))
}

fn ends_in_separator(path: &Path) -> bool {
    let s = path.as_os_str().as_encoded_bytes();
    s.last()
        .is_some_and(|&b| std::path::is_separator(char::from(b)))
}

enum Special {
    Stream(&'static str),
    Refused(&'static str),
}

#[cfg(unix)]
fn special_kind(meta: &Metadata) -> Special {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        Special::Stream("a FIFO")
    } else if t.is_char_device() {
        Special::Stream("a character device")
    } else if t.is_block_device() {
        Special::Refused("it is a block device; an array is not written over a disk")
    } else if t.is_socket() {
        Special::Refused("it is a socket, which cannot be opened as a file")
    } else {
        Special::Refused("it is not a file this tool can write")
    }
}

#[cfg(not(unix))]
fn special_kind(_: &Metadata) -> Special {
    Special::Stream("a device")
}

#[cfg(unix)]
fn node_identity(meta: &Metadata) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    Some(Identity::Node(meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn node_identity(_: &Metadata) -> Option<Identity> {
    None
}

/// Standard output's device and inode, so that `-` and a path to the same file (a
/// `/dev/stdout`, the file stdout is redirected to) are one output.
#[cfg(unix)]
pub fn stdout_identity() -> Result<Identity, String> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("standard output is not open: {e}"))?;
    let meta = std::fs::File::from(fd)
        .metadata()
        .map_err(|e| format!("standard output is not open: {e}"))?;
    node_identity(&meta).ok_or_else(|| "standard output has no identity".to_string())
}

#[cfg(not(unix))]
pub fn stdout_identity() -> Result<Identity, String> {
    Ok(Identity::Path(PathBuf::from("-")))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "wgpu-attention-target-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("real")).unwrap();
        d
    }

    #[test]
    fn links_lead_to_their_targets() {
        let d = dir("links");
        std::fs::write(d.join("real/t.npy"), b"old").unwrap();
        std::os::unix::fs::symlink("real/t.npy", d.join("link.npy")).unwrap();
        std::os::unix::fs::symlink("link.npy", d.join("link2.npy")).unwrap();
        std::os::unix::fs::symlink("real/new.npy", d.join("dangling.npy")).unwrap();
        let real = d.join("real/t.npy").canonicalize().unwrap();
        let (t, id) = resolve(&d.join("link2.npy")).unwrap();
        assert!(
            matches!(&t, Target::File { path, existing: Some(_) } if *path == real),
            "{t:?}"
        );
        assert_eq!(id, resolve(&d.join("real/t.npy")).unwrap().1);
        let (t, id) = resolve(&d.join("dangling.npy")).unwrap();
        assert!(
            matches!(&t, Target::File { path, existing: None } if path.ends_with("real/new.npy")),
            "{t:?}"
        );
        assert_eq!(id, resolve(&d.join("real/./new.npy")).unwrap().1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn folders_loops_and_missing_folders_are_refused() {
        let d = dir("refused");
        std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
        std::os::unix::fs::symlink("nowhere/x.npy", d.join("far")).unwrap();
        for (p, why) in [
            (d.join("real"), "folder"),
            (d.join("real/"), "folder"),
            (d.join("nowhere/x.npy"), "does not exist"),
            (d.join("far"), "link's target"),
            (d.join("loop1"), "loop"),
        ] {
            let e = resolve(&p).unwrap_err();
            assert!(e.contains(why), "{}: {e}", p.display());
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
