//! A command's outputs, written all together or not at all.
//!
//! Each output is claimed before any work: two outputs with one path are refused, and
//! a temporary file is created beside the output (same folder, so the final rename
//! stays on one file system), which makes an output path that cannot be created bad
//! input (exit 2) before anything runs. Results are written to the temporary files;
//! only when every write has succeeded are they renamed into place. A failure while
//! writing (a full disk, an I/O error) is a runtime error (exit 1), and every temporary
//! file is removed, so no partial file and no partial set of files is left behind.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::super::exit::CliError;

/// One claimed output: its flag, its final path and the temporary file beside it.
struct Claim {
    flag: &'static str,
    path: PathBuf,
    /// The output's folder and file name, as compared between claims.
    key: PathBuf,
    temp: PathBuf,
    file: Option<File>,
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

    /// Claims `path` for `flag` and creates its temporary file now.
    ///
    /// # Errors
    /// [`CliError::Input`] naming `flag` when another output has the same path, when the
    /// path is a folder, or when its folder does not exist or refuses a new file.
    pub fn claim(&mut self, flag: &'static str, path: &Path) -> Result<Slot, CliError> {
        let shown = path.display();
        let cannot = |why: String| CliError::input(flag, format!("cannot write {shown}: {why}"));
        let name = path
            .file_name()
            .ok_or_else(|| cannot("the path names no file".into()))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(cannot(format!(
                "directory {} does not exist",
                dir.display()
            )));
        }
        if path.is_dir() {
            return Err(cannot("it is a directory".into()));
        }
        let key = dir
            .canonicalize()
            .map_err(|e| cannot(e.to_string()))?
            .join(name);
        if let Some(other) = self.claims.iter().find(|c| c.key == key) {
            return Err(CliError::input(
                flag,
                format!(
                    "{shown} is also the path of {}; give each output its own",
                    other.flag
                ),
            ));
        }
        let temp = dir.join(format!(
            ".{}.{}-{}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            self.claims.len()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| cannot(e.to_string()))?;
        self.claims.push(Claim {
            flag,
            path: path.to_path_buf(),
            key,
            temp,
            file: Some(file),
        });
        Ok(Slot(self.claims.len() - 1))
    }

    /// Writes an output's contents to its temporary file with `write`, and flushes them
    /// to the disk.
    ///
    /// # Errors
    /// [`CliError::Runtime`] naming the flag and the path when a write fails.
    pub fn write(
        &mut self,
        slot: Slot,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CliError> {
        let claim = &mut self.claims[slot.0];
        let fail = |e: &dyn std::fmt::Display| {
            CliError::runtime(format!(
                "{}: cannot write {}: {e}",
                claim.flag,
                claim.path.display()
            ))
        };
        let Some(file) = claim.file.take() else {
            return Err(fail(&"written twice"));
        };
        let mut writer = BufWriter::new(file);
        write(&mut writer).map_err(|e| fail(&e))?;
        let file = writer.into_inner().map_err(|e| fail(&e.into_error()))?;
        // A full disk may only show when the data reaches it.
        file.sync_all().map_err(|e| fail(&e))?;
        Ok(())
    }

    /// Renames every temporary file into place, once all of them were written.
    ///
    /// # Errors
    /// [`CliError::Runtime`] when an output was never written or a rename fails.
    pub fn commit(mut self) -> Result<(), CliError> {
        if let Some(c) = self.claims.iter().find(|c| c.file.is_some()) {
            return Err(CliError::runtime(format!(
                "{}: {} was not written",
                c.flag,
                c.path.display()
            )));
        }
        for c in std::mem::take(&mut self.claims) {
            if let Err(e) = std::fs::rename(&c.temp, &c.path) {
                let _ = std::fs::remove_file(&c.temp);
                return Err(CliError::runtime(format!(
                    "{}: cannot write {}: {e}",
                    c.flag,
                    c.path.display()
                )));
            }
        }
        Ok(())
    }
}

impl Drop for OutputSet {
    fn drop(&mut self) {
        for c in &self.claims {
            let _ = std::fs::remove_file(&c.temp);
        }
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
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            2,
            "temporary files left"
        );
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
}
