//! The Vulkan loader prints `XDG_RUNTIME_DIR is invalid or not set` on headless Linux,
//! which reads like the tool's own error. When the variable is unset or names no
//! directory, the process gets a private one (mode 0700, removed at exit) before any
//! loader starts.

use std::path::PathBuf;

/// A runtime directory made for this process, removed when dropped.
pub struct RuntimeDir(Option<PathBuf>);

impl RuntimeDir {
    /// Sets `XDG_RUNTIME_DIR` to a fresh private directory when it is unset or invalid.
    /// Must run before any thread starts (it changes the environment).
    pub fn ensure() -> Self {
        if !cfg!(target_os = "linux") {
            return Self(None);
        }
        let valid = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .is_some_and(|d| d.is_absolute() && d.is_dir());
        if valid {
            return Self(None);
        }
        let dir = std::env::temp_dir().join(format!("wgpu-attention-run-{}", std::process::id()));
        if make_private(&dir).is_err() {
            return Self(None);
        }
        // Single-threaded here: main calls this first.
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
        Self(Some(dir))
    }
}

#[cfg(unix)]
fn make_private(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn make_private(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir(dir)
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
