//! Help text that several subcommands share.

/// The `--help` paragraph on outputs, for every subcommand that writes one (a macro so
/// that `concat!` can join it to a subcommand's example).
macro_rules! outputs_help {
    () => {
        "Outputs: a file is written beside its path and renamed into place once every output of
the command is complete, so none is ever partial; through a symbolic link the link's
target gets the result and the link stays (a dangling link's target is created). `-` is
standard output (binary .npy and .png are refused on a terminal). A character device or
FIFO is opened at the start (a FIFO waits for its reader) and written in place, never
replaced; what reaches it cannot be taken back, so it is written last, after every file,
and a command streams one output at most (`-` included). A folder, a missing folder, a
block device or socket, or two outputs naming one file is bad input (exit 2)."
    };
}
pub(crate) use outputs_help;
