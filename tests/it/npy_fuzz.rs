//! A bounded fuzz loop over the command line's `.npy` reader on the stable toolchain
//! (the libFuzzer target in fuzz/ needs nightly): thousands of mutations of valid files,
//! each read by every reader, none may panic.

/// The command line's error type, which the reader returns.
#[allow(dead_code)]
#[path = "../../src/cli/exit.rs"]
mod exit;

/// The bounded reads the reader uses.
#[allow(dead_code)]
#[path = "../../src/cli/io/mod.rs"]
mod io;

/// The reader, compiled from the command line's source.
#[allow(dead_code)]
#[path = "../../src/cli/npy.rs"]
mod npy;

use crate::common::Rng;

/// A valid `.npy` file (version 1.0) with this descriptor, order, shape and data.
fn file(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    let mut header = dict.into_bytes();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header);
    out.extend(data);
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let f32s: Vec<u8> = (0..24).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let f64s: Vec<u8> = (0..24).flat_map(|i| (i as f64).to_le_bytes()).collect();
    let f16s: Vec<u8> = (0..24).flat_map(|i| [i as u8, 0x3c]).collect();
    let i64s: Vec<u8> = (0..3i64).flat_map(|i| i.to_le_bytes()).collect();
    let i32s: Vec<u8> = (0..3i32).flat_map(|i| i.to_le_bytes()).collect();
    vec![
        file("<f4", false, "(1, 2, 3, 4)", &f32s),
        file("<f4", true, "(1, 2, 3, 4)", &f32s),
        file(">f4", false, "(2, 3, 4)", &f32s),
        file("<f8", false, "(1, 2, 3, 4)", &f64s),
        file("<f2", false, "(1, 2, 3, 4)", &f16s[..48]),
        file(">f2", true, "(4, 3, 2, 1)", &f16s[..48]),
        file("|b1", false, "(3, 8)", &[1u8; 24]),
        file("<i8", false, "(3,)", &i64s),
        file("<i4", false, "(3,)", &i32s),
    ]
}

/// Pieces of header text worth splicing in.
const TOKENS: &[&str] = &[
    "(",
    ")",
    ",",
    "-1",
    "0",
    "18446744073709551615",
    "4611686018427387904",
    "True",
    "'",
    "{",
    "}",
    "'shape'",
    "'descr'",
    "'<f4'",
    "'|b1'",
    "'<i8'",
    "'>f2'",
    "()",
    "\n",
    "\\",
    "1e9",
    "None",
];

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let pick = |rng: &mut Rng, n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    for _ in 0..1 + pick(rng, 4) {
        match pick(rng, 7) {
            0 if !bytes.is_empty() => {
                let i = pick(rng, bytes.len());
                bytes[i] ^= 1 << pick(rng, 8);
            }
            1 if !bytes.is_empty() => {
                let i = pick(rng, bytes.len());
                bytes[i] = [0, 0xff, b'\n', b' ', b'9', 0x7f][pick(rng, 6)];
            }
            2 => {
                let n = pick(rng, bytes.len() + 1);
                bytes.truncate(n);
            }
            3 => {
                let i = pick(rng, bytes.len() + 1);
                let t = TOKENS[pick(rng, TOKENS.len())];
                bytes.splice(i..i, t.bytes());
            }
            4 if bytes.len() > 10 => {
                // The header length field (version 1: two bytes at 8).
                let len = [0u16, 1, 60, 118, 200, u16::MAX][pick(rng, 6)];
                bytes[8..10].copy_from_slice(&len.to_le_bytes());
            }
            5 if bytes.len() > 7 => {
                bytes[6] = [1, 2, 3, 0, 9][pick(rng, 5)];
            }
            _ => {
                let extra = pick(rng, 16);
                bytes.extend((0..extra).map(|_| rng.next_u64() as u8));
            }
        }
    }
}

#[test]
fn mutated_npy_files_never_panic_the_reader() {
    let dir = std::env::temp_dir().join(format!("wgpu-attention-npy-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("x.npy");
    let seeds = seeds();
    // Every seed must be readable before mutation, or the loop tests nothing.
    for (n, s) in seeds.iter().enumerate() {
        std::fs::write(&path, s).expect("write");
        let read = npy::read_floats("--q", &path).is_ok()
            || npy::read_mask("--mask", &path).is_ok()
            || npy::read_lens("--kv-lens", &path).is_ok();
        assert!(read, "seed {n} is not read by any reader");
    }
    let mut rng = Rng::new(91);
    let mut accepted = 0;
    for iter in 0..3_000 {
        let mut bytes = seeds[iter % seeds.len()].clone();
        mutate(&mut rng, &mut bytes);
        std::fs::write(&path, &bytes).expect("write");
        let outcome = std::panic::catch_unwind(|| {
            let floats = npy::read_floats("--q", &path);
            if let Ok(a) = &floats {
                assert_eq!(a.len(), a.shape().iter().product::<usize>());
            }
            let mask = npy::read_mask("--mask", &path);
            let lens = npy::read_lens("--kv-lens", &path);
            usize::from(floats.is_ok()) + usize::from(mask.is_ok()) + usize::from(lens.is_ok())
        });
        match outcome {
            Ok(n) => accepted += n,
            Err(_) => {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("the reader panicked on iteration {iter}: bytes {bytes:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Some mutations (a flipped data bit) leave a valid file: the readers were reached.
    assert!(
        accepted > 100,
        "only {accepted} mutated files were read at all"
    );
}
