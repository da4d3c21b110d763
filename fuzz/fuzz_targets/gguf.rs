//! Any bytes as a GGUF model file: the container reader, then every tensor's bytes and
//! dequantized values, then the llama loader on top. A result or a typed error, never a
//! panic or an allocation the file cannot back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wgpu_attention::model::llama::{gguf, LlamaModel};

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = gguf::parse(data) {
        for t in &file.tensors {
            if let Ok(bytes) = file.tensor_data(t) {
                assert!(bytes.len() <= data.len());
            }
            if let Ok(values) = file.dequantize(t) {
                assert_eq!(values.len() as u64, t.elements());
            }
        }
    }
    let _ = LlamaModel::from_gguf_bytes(data);
});
