//! Bind groups kept from one recording to the next, for dispatches whose parameters and
//! buffers have not changed: a model's decoding steps record the same 183 dispatches
//! every step, and on lavapipe creating their bind groups and parameter buffers took the
//! host 1.2 ms of a 41 ms step (BENCHMARKS "The host's share of a decoding step"),
//! while the device waited for the submission.

use std::num::NonZeroU64;

use super::buffers::with_contents;
use super::context::GpuContext;
use crate::error::Result;

/// Builds a bind group for `layout` from resources in binding order.
pub(crate) fn bind_group<'a>(
    ctx: &GpuContext,
    label: &str,
    layout: &wgpu::BindGroupLayout,
    resources: impl IntoIterator<Item = wgpu::BindingResource<'a>>,
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry> = resources
        .into_iter()
        .enumerate()
        .map(|(i, resource)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource,
        })
        .collect();
    ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout,
        entries: &entries,
    })
}

/// A bind group for `layout` with `params` in a new uniform buffer at binding 0 and
/// `rest` at bindings 1 ..: what a dispatch binds when no kept group serves.
///
/// # Errors
/// A device error creating the parameters' buffer.
pub(crate) fn params_group(
    ctx: &GpuContext,
    label: &str,
    layout: &wgpu::BindGroupLayout,
    params: &[u8],
    rest: Vec<wgpu::BindingResource<'_>>,
) -> Result<wgpu::BindGroup> {
    let buffer = with_contents(ctx, label, params, wgpu::BufferUsages::UNIFORM)?;
    let resources = std::iter::once(buffer.as_entire_binding()).chain(rest);
    Ok(bind_group(ctx, label, layout, resources))
}

/// The bind groups of the last recording, one slot per dispatch in recording order.
#[derive(Default)]
pub(crate) struct BindCache {
    slots: Vec<Option<Slot>>,
    next: usize,
}

/// One dispatch's bind group and what it binds: its uniform parameters (binding 0, a
/// buffer of their own, never written again) and every other binding's buffer range.
struct Slot {
    layout: wgpu::BindGroupLayout,
    params: Vec<u8>,
    rest: Vec<Bound>,
    group: wgpu::BindGroup,
}

/// A buffer range as bound.
#[derive(PartialEq, Eq)]
struct Bound {
    buffer: wgpu::Buffer,
    offset: u64,
    size: Option<NonZeroU64>,
}

impl BindCache {
    /// Starts a recording: the next group asked for takes the first slot.
    pub(crate) fn restart(&mut self) {
        self.next = 0;
    }

    /// The bind group for `layout` with `params` in a uniform buffer at binding 0 and
    /// `rest` at bindings 1 ..: the one kept in this dispatch's slot where it was made
    /// for the same layout, parameters and buffer ranges, else a new one (then kept).
    ///
    /// # Errors
    /// A device error creating the parameters' buffer.
    pub(crate) fn group(
        &mut self,
        ctx: &GpuContext,
        label: &str,
        layout: &wgpu::BindGroupLayout,
        params: &[u8],
        rest: Vec<wgpu::BindingResource<'_>>,
    ) -> Result<wgpu::BindGroup> {
        let at = self.next;
        self.next += 1;
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
        }
        // Only buffer ranges are compared; anything else is bound afresh.
        let bound: Option<Vec<Bound>> = rest
            .iter()
            .map(|r| match r {
                wgpu::BindingResource::Buffer(b) => Some(Bound {
                    buffer: b.buffer.clone(),
                    offset: b.offset,
                    size: b.size,
                }),
                _ => None,
            })
            .collect();
        if let (Some(slot), Some(bound)) = (&self.slots[at], &bound) {
            if slot.layout == *layout && slot.params == params && slot.rest == *bound {
                return Ok(slot.group.clone());
            }
        }
        let group = params_group(ctx, label, layout, params, rest)?;
        self.slots[at] = bound.map(|rest| Slot {
            layout: layout.clone(),
            params: params.to_vec(),
            rest,
            group: group.clone(),
        });
        Ok(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::device::buffers::empty;

    fn entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
        wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }
    }

    /// A slot gives its group back only for the same layout, parameters and buffer
    /// ranges; any change, or another slot of the same recording, makes a new one.
    #[test]
    fn a_group_is_reused_only_where_it_binds_the_same() {
        let ctx = GpuContext::new().expect("an adapter");
        let storage = wgpu::BufferBindingType::Storage { read_only: true };
        let layout = ctx
            .device()
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: None,
                entries: &[
                    entry(0, wgpu::BufferBindingType::Uniform),
                    entry(1, storage),
                ],
            });
        let usage = wgpu::BufferUsages::STORAGE;
        let a = empty(&ctx, "a", 64, usage).expect("a buffer");
        let b = empty(&ctx, "b", 64, usage).expect("a buffer");
        let mut cache = BindCache::default();
        let once = |cache: &mut BindCache, params: u8, buffer: &wgpu::Buffer, offset| {
            cache.restart();
            let rest = vec![wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset,
                size: NonZeroU64::new(16),
            })];
            cache
                .group(&ctx, "test", &layout, &[params; 16], rest)
                .expect("a group")
        };
        let first = once(&mut cache, 1, &a, 0);
        assert!(once(&mut cache, 1, &a, 0) == first, "the same bindings");
        let other_params = once(&mut cache, 2, &a, 0);
        assert!(other_params != first, "other parameters");
        let other_buffer = once(&mut cache, 2, &b, 0);
        assert!(other_buffer != other_params, "another buffer");
        let other_offset = once(&mut cache, 2, &b, 16);
        assert!(other_offset != other_buffer, "another offset");
        assert!(once(&mut cache, 2, &b, 16) == other_offset, "kept again");
        // Two dispatches of one recording: the second takes a slot of its own.
        cache.restart();
        let bind = |cache: &mut BindCache| {
            let rest = vec![b.as_entire_binding()];
            cache
                .group(&ctx, "test", &layout, &[3; 16], rest)
                .expect("a group")
        };
        let (one, two) = (bind(&mut cache), bind(&mut cache));
        assert!(one != two, "each dispatch its own slot");
        cache.restart();
        assert!(
            bind(&mut cache) == one && bind(&mut cache) == two,
            "both kept"
        );
    }
}
