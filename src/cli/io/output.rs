//! A command's outputs, written all together or not at all, without ever replacing what
//! is not theirs.
//!
//! Every output is claimed before any work, which resolves its path (`target.rs`): a
//! path that cannot be written, two outputs naming one file (after links, by device and
//! inode where the file exists), or a second streamed output is bad input (exit 2)
//! before anything runs.
//!
//! - A regular file, or a new one, is written to a temporary file created at claim time
//!   in the final target's folder (one file system, so the rename is atomic) and synced;
//!   only when every output has been written are the temporary files renamed into
//!   place. A rename that fails halfway undoes the ones before it.
//! - Standard output (`-`), a character device or a FIFO is written in place and never
//!   renamed over. Written bytes cannot be taken back, so such an output is written only
//!   once every file of the set is complete (held in memory until then if the command
//!   writes it earlier), and a command may have one at most.
//!
//! A failure while writing (a full disk, a closed pipe) is a runtime error (exit 1) and
//! every temporary file is removed, so no partial file and no partial set of files is
//! left behind.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::super::exit::CliError;
use super::target::{folder_of, resolve, stdout_identity, Identity, Target};

/// Whether an output may be shown on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    Binary,
    Text,
}

/// One claimed output.
struct Claim {
    flag: &'static str,
    /// The path as given, for messages.
    shown: String,
    identity: Identity,
    sink: Sink,
}

enum Sink {
    /// A temporary file beside `path`, renamed over it on commit.
    Staged {
        path: PathBuf,
        temp: PathBuf,
        /// `None` once written.
        file: Option<File>,
    },
    /// Standard output, a device or a FIFO, written in place.
    Direct { to: Stream, state: DirectState },
}

enum Stream {
    Stdout,
    Node(File),
}

enum DirectState {
    Pending,
    /// Written by the command before every file was complete: sent on commit.
    Held(Vec<u8>),
    Sent,
}

/// The outputs of one command. Dropping it without [`OutputSet::commit`] removes every
/// temporary file.
#[derive(Default)]
pub struct OutputSet {
    claims: Vec<Claim>,
}

/// Which claimed output to write: returned by [`OutputSet::claim`].
#[derive(Debug, Clone, Copy)]
pub struct Slot(usize);

impl OutputSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims `path` for `flag`, a binary output (`.npy`, `.png`): refused when it would
    /// go to a terminal.
    ///
    /// # Errors
    /// [`CliError::Input`] naming `flag` when the path cannot be an output (see the
    /// module docs), names a file another output names, or is a second streamed output.
    pub fn claim(&mut self, flag: &'static str, path: &Path) -> Result<Slot, CliError> {
        self.claim_as(flag, path, Content::Binary)
    }

    /// As [`OutputSet::claim`], for text (JSON, SVG), which may go to a terminal.
    ///
    /// # Errors
    /// As [`OutputSet::claim`].
    pub fn claim_text(&mut self, flag: &'static str, path: &Path) -> Result<Slot, CliError> {
        self.claim_as(flag, path, Content::Text)
    }

    fn claim_as(
        &mut self,
        flag: &'static str,
        path: &Path,
        content: Content,
    ) -> Result<Slot, CliError> {
        let shown = if path.as_os_str() == "-" {
            "standard output".to_string()
        } else {
            path.display().to_string()
        };
        let cannot = |why: String| CliError::input(flag, format!("cannot write {shown}: {why}"));
        let (target, identity) = resolve(path).map_err(cannot)?;
        if let Some(other) = self.claims.iter().find(|c| c.identity == identity) {
            return Err(CliError::input(
                flag,
                format!(
                    "{shown} is the file {} writes too ({}); give each output its own",
                    other.flag, other.shown
                ),
            ));
        }
        let streamed = |c: &Claim| matches!(c.sink, Sink::Direct { .. });
        let sink = match target {
            Target::File { path, existing } => {
                let temp = folder_of(&path).join(format!(
                    ".{}.{}-{}.tmp",
                    path.file_name().unwrap_or_default().to_string_lossy(),
                    std::process::id(),
                    self.claims.len()
                ));
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&temp)
                    .map_err(|e| cannot(e.to_string()))?;
                // The file replaced keeps its permissions.
                if let Some(meta) = existing {
                    if let Err(e) = file.set_permissions(meta.permissions()) {
                        let _ = std::fs::remove_file(&temp);
                        return Err(cannot(e.to_string()));
                    }
                }
                Sink::Staged {
                    path,
                    temp,
                    file: Some(file),
                }
            }
            Target::Stdout | Target::Stream { .. } if self.claims.iter().any(streamed) => {
                let other = self.claims.iter().find(|c| streamed(c)).map(|c| c.flag);
                return Err(cannot(format!(
                    "{} is streamed already, and a command streams one output at most \
                     (what was sent cannot be taken back if another fails)",
                    other.unwrap_or("another output")
                )));
            }
            Target::Stdout => {
                if content == Content::Binary && std::io::stdout().is_terminal() {
                    return Err(cannot(
                        "it is a terminal and this output is binary: redirect or pipe it".into(),
                    ));
                }
                Sink::Direct {
                    to: Stream::Stdout,
                    state: DirectState::Pending,
                }
            }
            Target::Stream { path, kind } => {
                // Opened now (a FIFO waits for its reader here, as a shell redirection
                // does), never created or truncated.
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| cannot(format!("{kind}: {e}")))?;
                if file.metadata().is_ok_and(|m| m.is_file()) {
                    return Err(cannot(
                        "it changed into a regular file as it was opened".into(),
                    ));
                }
                if content == Content::Binary && file.is_terminal() {
                    return Err(cannot(
                        "it is a terminal and this output is binary: redirect or pipe it".into(),
                    ));
                }
                Sink::Direct {
                    to: Stream::Node(file),
                    state: DirectState::Pending,
                }
            }
        };
        self.claims.push(Claim {
            flag,
            shown,
            identity,
            sink,
        });
        Ok(Slot(self.claims.len() - 1))
    }

    /// Whether an output goes where standard output goes: the command's own messages
    /// belong on stderr then.
    pub fn uses_stdout(&self) -> bool {
        let stdout = stdout_identity().ok();
        self.claims.iter().any(|c| {
            matches!(
                c.sink,
                Sink::Direct {
                    to: Stream::Stdout,
                    ..
                }
            ) || Some(&c.identity) == stdout.as_ref()
        })
    }

    /// Writes an output's contents with `write`: a file's to its temporary file, synced
    /// to the disk; a stream's in place, or held until every file is written.
    ///
    /// # Errors
    /// [`CliError::Runtime`] naming the flag and the path when a write fails.
    pub fn write(
        &mut self,
        slot: Slot,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CliError> {
        let files_pending = self
            .claims
            .iter()
            .enumerate()
            .any(|(i, c)| i != slot.0 && matches!(c.sink, Sink::Staged { file: Some(_), .. }));
        let claim = &mut self.claims[slot.0];
        let fail = failure(claim.flag, &claim.shown);
        match &mut claim.sink {
            Sink::Staged { file, .. } => {
                let file = file.take().ok_or_else(|| fail(&"written twice"))?;
                let mut writer = BufWriter::new(file);
                write(&mut writer).map_err(|e| fail(&e))?;
                let file = writer.into_inner().map_err(|e| fail(&e.into_error()))?;
                // A full disk may only show when the data reaches it.
                file.sync_all().map_err(|e| fail(&e))?;
            }
            Sink::Direct { to, state } => {
                if !matches!(state, DirectState::Pending) {
                    return Err(fail(&"written twice"));
                }
                if files_pending {
                    let mut held = Vec::new();
                    write(&mut held).map_err(|e| fail(&e))?;
                    *state = DirectState::Held(held);
                } else {
                    send(to, write).map_err(|e| fail(&e))?;
                    *state = DirectState::Sent;
                }
            }
        }
        Ok(())
    }

    /// Sends a held stream, then renames every temporary file into place, once all
    /// outputs were written.
    ///
    /// # Errors
    /// [`CliError::Runtime`] when an output was never written, a stream fails, or a
    /// rename fails (the renames before it are undone).
    pub fn commit(mut self) -> Result<(), CliError> {
        let unwritten = self.claims.iter().find(|c| {
            matches!(
                c.sink,
                Sink::Staged { file: Some(_), .. }
                    | Sink::Direct {
                        state: DirectState::Pending,
                        ..
                    }
            )
        });
        if let Some(c) = unwritten {
            return Err(failure(c.flag, &c.shown)(&"it was not written"));
        }
        for c in &mut self.claims {
            if let Sink::Direct { to, state } = &mut c.sink {
                if let DirectState::Held(bytes) = std::mem::replace(state, DirectState::Sent) {
                    send(to, |w| w.write_all(&bytes)).map_err(|e| failure(c.flag, &c.shown)(&e))?;
                }
            }
        }
        let mut done: Vec<Renamed> = Vec::new();
        for (n, c) in self.claims.iter().enumerate() {
            let Sink::Staged { path, temp, .. } = &c.sink else {
                continue;
            };
            let before = keep_old(path, n);
            if let Err(e) = std::fs::rename(temp, path) {
                if let Before::Kept(backup) = &before {
                    let _ = std::fs::remove_file(backup);
                }
                for r in done.iter().rev() {
                    r.undo();
                }
                return Err(failure(c.flag, &c.shown)(&e));
            }
            done.push(Renamed {
                path: path.clone(),
                before,
            });
        }
        for r in &done {
            if let Before::Kept(backup) = &r.before {
                let _ = std::fs::remove_file(backup);
            }
        }
        Ok(())
    }
}

impl Drop for OutputSet {
    fn drop(&mut self) {
        for c in &self.claims {
            if let Sink::Staged { temp, .. } = &c.sink {
                // Gone already once committed.
                let _ = std::fs::remove_file(temp);
            }
        }
    }
}

/// A runtime error naming the output.
fn failure<'a>(flag: &'a str, shown: &'a str) -> impl Fn(&dyn std::fmt::Display) -> CliError + 'a {
    move |e| CliError::runtime(format!("{flag}: cannot write {shown}: {e}"))
}

/// Writes a stream through a buffer and flushes it.
fn send(
    to: &mut Stream,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    match to {
        Stream::Stdout => {
            let mut w = BufWriter::new(std::io::stdout().lock());
            write(&mut w)?;
            w.flush()
        }
        Stream::Node(file) => {
            let mut w = BufWriter::new(file);
            write(&mut w)?;
            w.flush()
        }
    }
}

/// What was at a renamed output's path before.
enum Before {
    Nothing,
    /// A second name of the old file, to put back if a later rename fails.
    Kept(PathBuf),
    /// A file that could not be kept (no hard links here): a failure leaves the new one.
    Lost,
}

struct Renamed {
    path: PathBuf,
    before: Before,
}

impl Renamed {
    fn undo(&self) {
        match &self.before {
            Before::Nothing => {
                let _ = std::fs::remove_file(&self.path);
            }
            Before::Kept(old) => {
                let _ = std::fs::rename(old, &self.path);
            }
            Before::Lost => {}
        }
    }
}

/// Gives the file at `path`, if any, a second name beside it before it is replaced.
fn keep_old(path: &Path, n: usize) -> Before {
    if std::fs::symlink_metadata(path).is_err() {
        return Before::Nothing;
    }
    let backup = folder_of(path).join(format!(
        ".{}.{}-{n}.old",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    match std::fs::hard_link(path, &backup) {
        Ok(()) => Before::Kept(backup),
        Err(_) => Before::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wgpu-attention-out-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn nothing_appears_until_every_output_is_written() {
        let d = dir("all");
        let mut set = OutputSet::new();
        let a = set.claim("--out", &d.join("a.npy")).unwrap();
        let b = set.claim("--lse", &d.join("b.npy")).unwrap();
        set.write(a, |w| w.write_all(b"a")).unwrap();
        assert!(!d.join("a.npy").exists());
        set.write(b, |w| w.write_all(b"b")).unwrap();
        set.commit().unwrap();
        assert_eq!(std::fs::read(d.join("a.npy")).unwrap(), b"a");
        assert_eq!(names(&d), ["a.npy", "b.npy"], "temporary files left");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let d = dir("fail");
        let mut set = OutputSet::new();
        let a = set.claim("--out", &d.join("a.npy")).unwrap();
        let b = set.claim("--lse", &d.join("b.npy")).unwrap();
        set.write(a, |w| w.write_all(b"a")).unwrap();
        let e = set
            .write(b, |_| Err(std::io::Error::other("disk full")))
            .unwrap_err();
        assert!(matches!(e, CliError::Runtime(_)), "{e}");
        drop(set);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_unwritten_output_commits_nothing() {
        let d = dir("unwritten");
        let mut set = OutputSet::new();
        let a = set.claim("--out", &d.join("a.npy")).unwrap();
        set.claim("--lse", &d.join("b.npy")).unwrap();
        set.write(a, |w| w.write_all(b"a")).unwrap();
        let e = set.commit().unwrap_err();
        assert!(e.to_string().contains("--lse"), "{e}");
        assert!(names(&d).is_empty(), "{:?}", names(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The second rename fails (a folder took its path): the first output is undone,
    /// the new file removed and the replaced one put back.
    #[test]
    fn a_failed_rename_undoes_the_renames_before_it() {
        let d = dir("rename");
        std::fs::write(d.join("old.npy"), b"old").unwrap();
        let mut set = OutputSet::new();
        let a = set.claim("--out", &d.join("new.npy")).unwrap();
        let b = set.claim("--weights", &d.join("old.npy")).unwrap();
        let c = set.claim("--lse", &d.join("c.npy")).unwrap();
        for s in [a, b, c] {
            set.write(s, |w| w.write_all(b"fresh")).unwrap();
        }
        std::fs::create_dir_all(d.join("c.npy/inside")).unwrap();
        let e = set.commit().unwrap_err();
        assert!(e.to_string().contains("--lse"), "{e}");
        assert_eq!(std::fs::read(d.join("old.npy")).unwrap(), b"old");
        assert_eq!(names(&d), ["c.npy", "old.npy"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_path_twice_is_bad_input() {
        let d = dir("twice");
        let mut set = OutputSet::new();
        set.claim("--out", &d.join("o.npy")).unwrap();
        let e = set.claim("--lse", &d.join("./o.npy")).err().unwrap();
        assert!(
            matches!(
                e,
                CliError::Input {
                    flag: Some("--lse"),
                    ..
                }
            ),
            "{e}"
        );
        drop(set);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("mode");
        std::fs::write(d.join("o.npy"), b"old").unwrap();
        std::fs::set_permissions(d.join("o.npy"), std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut set = OutputSet::new();
        let a = set.claim("--out", &d.join("o.npy")).unwrap();
        set.write(a, |w| w.write_all(b"new")).unwrap();
        set.commit().unwrap();
        let meta = std::fs::metadata(d.join("o.npy")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read(d.join("o.npy")).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
