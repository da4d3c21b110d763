//! Recording: from a prepared route to commands in an encoder, and nothing that decides.
//! The forward of each path (`paths/`: staged, one pass, split-KV, the weights from the
//! log-sum-exp), a prepared [`route::Route`] that records one of them, what every record
//! function is handed (`io.rs`), the bindings of each chunk (`chunk_bindings.rs`), the
//! uploads a call records with its commands (`upload.rs`), and zero-filled buffers the
//! deciding layer records into when it times or probes (`zero_run.rs`).

pub(crate) mod chunk_bindings;
pub(crate) mod io;
pub(crate) mod paths;
pub(crate) mod route;
pub(crate) mod upload;
pub(crate) mod zero_run;
