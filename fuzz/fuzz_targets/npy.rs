//! Any bytes as a `.npy` file given to each of the command line's readers: a result
//! or a typed input error, never a panic or an allocation the file cannot back.

#![no_main]

use libfuzzer_sys::fuzz_target;

/// The command line's own error type, which the reader returns.
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

/// The bounded reads the reader uses.
#[allow(dead_code)]
#[path = "../../src/cli/io/mod.rs"]
mod io;

/// The reader itself, compiled from the command line's source.
#[allow(dead_code)]
#[path = "../../src/cli/npy.rs"]
mod npy;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("wgpu-attention-fuzz-{}.npy", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(a) = npy::read_floats("--q", &path) {
        // Whatever was accepted has exactly the elements its shape says.
        assert_eq!(a.len(), a.shape().iter().product::<usize>());
    }
    let _ = npy::read_mask("--mask", &path);
    let _ = npy::read_lens("--kv-lens", &path);
});
