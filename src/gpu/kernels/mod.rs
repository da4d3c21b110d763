//! One launcher per WGSL kernel: its binding layout and its dispatch size.

pub(crate) mod cast;
pub(crate) mod combine;
pub(crate) mod decode;
pub(crate) mod decode_subgroup;
pub(crate) mod dispatch;
pub(crate) mod elem;
pub(crate) mod fused;
pub(crate) mod fused_lanes;
pub(crate) mod fused_tiled;
pub(crate) mod key_loop;
pub(crate) mod launch;
pub(crate) mod layout;
pub(crate) mod linear;
pub(crate) mod linear_class;
pub(crate) mod linear_tune;
pub(crate) mod params;
pub(crate) mod patterns;
pub(crate) mod pipelines;
pub(crate) mod plan;
pub(crate) mod pv;
pub(crate) mod qk;
pub(crate) mod softmax;
pub(crate) mod source;
pub(crate) mod subgroups;
pub(crate) mod weights;
pub(crate) mod wgsl;
