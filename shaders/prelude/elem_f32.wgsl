// Storage type of q, k and v: f32. Concatenated first, in front of common.wgsl.
alias elem = f32;
