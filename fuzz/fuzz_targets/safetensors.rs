//! Any bytes as a `.safetensors` weights file: the command line's bounded read (header
//! first, length promised by the header) and then the layer's reader. A result or a
//! typed error, never a panic or an allocation the file cannot back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wgpu_attention::MhaWeights;

/// The command line's own error type, which the bounded read returns.
#[allow(dead_code)]
mod exit {
    #[derive(Debug)]
    pub struct CliError {
        pub flag: &'static str,
        pub msg: String,
    }

    impl CliError {
        pub fn input(flag: &'static str, msg: impl Into<String>) -> Self {
            Self {
                flag,
                msg: msg.into(),
            }
        }

        pub fn runtime(msg: impl Into<String>) -> Self {
            Self::input("", msg)
        }
    }
}

/// The bounded reads, compiled from the command line's source.
#[allow(dead_code)]
#[path = "../../src/cli/io/mod.rs"]
mod io;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!(
        "wgpu-attention-fuzz-{}.safetensors",
        std::process::id()
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(bytes) = io::read::read_bounded("--weights", &path, io::read::safetensors_len) {
        assert_eq!(bytes.len(), data.len());
    }
    // The library's reader on the raw bytes too: it must stand on its own.
    for (heads, kv_heads) in [(1, None), (2, Some(1))] {
        let _ = MhaWeights::from_safetensors(data, heads, kv_heads);
    }
});
