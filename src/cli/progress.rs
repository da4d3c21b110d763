//! What a long command is doing, on stderr, only when stderr is a terminal and
//! `--quiet` was not given: stdout stays the command's output alone.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A spinner with a message and the time elapsed; cleared when dropped.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn start(quiet: bool, msg: &str) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_message(msg.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        Self(Some(bar))
    }

    /// Replaces the message: the next step of the command.
    pub fn step(&self, msg: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(msg.to_string());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
