//! Every WGSL kernel parses and validates with naga, without a GPU.

#[test]
fn every_shader_validates() {
    assert!(!wgpu_attention::SHADER_SOURCES.is_empty());
    for (name, source) in wgpu_attention::SHADER_SOURCES {
        let module = naga::front::wgsl::parse_str(source)
            .unwrap_or_else(|e| panic!("{name}: parse error:\n{}", e.emit_to_string(source)));
        let mut validator = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        );
        validator
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: invalid:\n{}", e.emit_to_string(source)));
    }
}

/// WGSL makes a constant expression that evaluates to inf or NaN a shader-creation error.
/// naga accepts it, but browsers' compilers reject the module, so the bit patterns must go
/// through a runtime value (the prelude's `neg_inf()` and `quiet_nan()`).
#[test]
fn no_shader_bitcasts_a_literal_to_a_float() {
    for (name, source) in wgpu_attention::SHADER_SOURCES {
        for (n, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("bitcast<f32>(") {
                let arg = code[at + "bitcast<f32>(".len()..].trim_start();
                assert!(
                    !arg.starts_with(|c: char| c.is_ascii_digit()),
                    "{name}:{}: bitcast of a literal is a constant expression: {line}",
                    n + 1
                );
            }
        }
    }
}
