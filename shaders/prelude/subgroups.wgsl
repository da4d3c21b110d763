// Subgroup operations (the adapter has the `subgroup` feature). Concatenated first, before
// the element-type prelude: enable directives must precede every declaration.
enable subgroups;
