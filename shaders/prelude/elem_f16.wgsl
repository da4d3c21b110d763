// Storage type of q, k and v: f16 (the adapter has shader-f16). Concatenated first:
// the enable directive must precede every declaration.
enable f16;
alias elem = f16;
