//! The dequantizer of every GGUF type the crate reads against `gguf.quants.dequantize`
//! (tests/fixtures/models/llama/quants.py wrote quants.json): bit for bit.

use std::path::PathBuf;

use wgpu_attention::model::llama::quant::{dequantize, GgmlType};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn cases() -> serde_json::Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/llama/quants.json");
    let text = std::fs::read_to_string(path).expect("quants.json");
    serde_json::from_str::<serde_json::Value>(&text).expect("json")["cases"].clone()
}

#[test]
fn every_type_dequantizes_as_the_gguf_package_does() {
    let cases = cases();
    let types = [
        ("F16", GgmlType::F16),
        ("Q4_0", GgmlType::Q4_0),
        ("Q4_1", GgmlType::Q4_1),
        ("Q8_0", GgmlType::Q8_0),
        ("Q4_K", GgmlType::Q4_K),
        ("Q6_K", GgmlType::Q6_K),
    ];
    for (name, ty) in types {
        let case = &cases[name];
        let bytes = hex(case["bytes"].as_str().expect("bytes"));
        let want: Vec<f32> = hex(case["values"].as_str().expect("values"))
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let got = dequantize(ty, &bytes);
        assert_eq!(got.len(), want.len(), "{name}: value count");
        let bad = got
            .iter()
            .zip(&want)
            .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()));
        if let Some(i) = bad {
            panic!(
                "{name}: element {i} is {} (bits {:#x}), gguf gives {} (bits {:#x})",
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            );
        }
    }
}
