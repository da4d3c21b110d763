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
