// Subgroup operations (the adapter has the `subgroup` feature). Concatenated first, before
// the element-type prelude, because this is where the standard `enable subgroups;`
// directive belongs, ahead of every declaration. Naga 30 (wgpu 30) refuses that directive
// ("not yet implemented") and instead accepts the subgroup builtins under its SUBGROUP
// capability, which the device enables with the feature; so the directive stays out until
// naga takes it, and the subgroup kernels are not offered on the web, where the browser's
// compiler would require it.
