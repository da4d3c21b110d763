//! Errors of the command line and their exit codes: 2 for bad input, 1 for a device or
//! runtime failure. Every message is one line on stderr, naming the flag when there is one.

use std::fmt;
use std::process::ExitCode;

use wgpu_attention::AttentionError;

/// Why a command failed, already worded for the user.
#[derive(Debug)]
pub enum CliError {
    /// The user's input is wrong: exit 2. `flag` is the flag to blame, e.g. `--k`.
    Input {
        flag: Option<&'static str>,
        msg: String,
    },
    /// The device or the environment failed: exit 1.
    Runtime(String),
}

impl CliError {
    pub fn input(flag: &'static str, msg: impl Into<String>) -> Self {
        Self::Input {
            flag: Some(flag),
            msg: msg.into(),
        }
    }

    pub fn runtime(msg: impl Into<String>) -> Self {
        Self::Runtime(msg.into())
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Input { .. } => ExitCode::from(2),
            Self::Runtime(_) => ExitCode::from(1),
        }
    }

    /// Prints `error: ...` as one line on stderr.
    pub fn report(&self) {
        eprintln!("error: {}", one_line(&self.to_string()));
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input {
                flag: Some(flag),
                msg,
            } => write!(f, "{flag}: {msg}"),
            Self::Input { flag: None, msg } | Self::Runtime(msg) => f.write_str(msg),
        }
    }
}

impl From<AttentionError> for CliError {
    fn from(e: AttentionError) -> Self {
        let (arg, detail) = match &e {
            AttentionError::Shape { arg, detail }
            | AttentionError::InvalidOption { arg, detail } => (*arg, detail.clone()),
            AttentionError::TooLarge { arg, detail } => {
                (*arg, format!("too large for this device: {detail}"))
            }
            _ => return Self::Runtime(e.to_string()),
        };
        if !e.is_input_error() {
            return Self::Runtime(e.to_string());
        }
        match flag_of(arg) {
            Some(flag) => Self::input(flag, detail),
            None => Self::Input {
                flag: None,
                msg: e.to_string(),
            },
        }
    }
}

/// The flag of `run` that supplies a library argument.
fn flag_of(arg: &str) -> Option<&'static str> {
    Some(match arg {
        "q" => "--q",
        "k" => "--k",
        "v" => "--v",
        "out" => "--out",
        "mask" => "--mask",
        "kv_lens" => "--kv-lens",
        "scale" => "--scale",
        "window" => "--window",
        "causal" => "--causal",
        "alignment" => "--align",
        "weights" | "return_weights" => "--weights",
        "lse" | "return_lse" => "--lse",
        "precision" => "--precision",
        _ => return None,
    })
}

/// Joins a message's lines so the report is a single line (device errors span several).
pub fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reports a clap error in the same one-line form as ours; `--help` and `--version`
/// print in full and succeed.
pub fn clap_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // A closed stdout (e.g. `| head`) is no reason to fail.
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // clap's message without its usage line, joined into one line.
    let text = e.render().to_string();
    let mut line = String::new();
    for part in text.lines().map(str::trim) {
        if part.is_empty() || part.starts_with("Usage:") {
            continue;
        }
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    eprintln!("{line}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_map_to_flags() {
        let e = CliError::from(AttentionError::Shape {
            arg: "kv_lens",
            detail: "expected shape (2,)".into(),
        });
        assert!(matches!(
            e,
            CliError::Input {
                flag: Some("--kv-lens"),
                ..
            }
        ));
        assert_eq!(e.to_string(), "--kv-lens: expected shape (2,)");
        let e = CliError::from(AttentionError::Unsupported("precision f16".into()));
        assert!(matches!(e, CliError::Runtime(_)));
        let e = CliError::from(AttentionError::Device("lost\n  twice".into()));
        assert_eq!(one_line(&e.to_string()), "device error: lost twice");
    }
}
