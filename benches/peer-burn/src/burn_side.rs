//! burn's side: its fused attention op on its wgpu backend (autotune and fusion on).

use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Device, DeviceKind, Tensor, TensorData};

use crate::inputs::{Inputs, Shape};
use crate::library::Library;

pub struct Burn {
    device: Device,
}

pub struct Prepared {
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
}

impl Burn {
    /// burn's default wgpu device: the same adapter the Vulkan loader offers this crate
    /// (cubecl's own `CUBECL_WGPU_DEFAULT_DEVICE` can change it).
    pub fn new() -> Self {
        Self {
            device: Device::wgpu(DeviceKind::DefaultDevice),
        }
    }

    fn launch(&self, p: &Prepared) -> Tensor<4> {
        // `scale: None` (1/sqrt(D)) on purpose: burn sends any explicit scale, softcap or
        // bias to its unfused fallback.
        attention(
            p.q.clone(),
            p.k.clone(),
            p.v.clone(),
            None,
            None,
            AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: p.causal,
            },
        )
    }

    /// Waits for every queued operation. `into_data` is not a sync point in burn 0.22:
    /// it returns lazily device-backed bytes.
    fn sync(&self) -> Result<(), String> {
        self.device
            .sync()
            .map_err(|e| format!("burn device sync: {e:?}"))
    }
}

impl Library for Burn {
    type Prepared = Prepared;

    fn adapter(&self) -> String {
        self.device
            .identity()
            .map(|id| id.name)
            .unwrap_or_else(|| "default".into())
    }

    fn prepare(&self, shape: &Shape, inputs: &Inputs) -> Result<Prepared, String> {
        let up = |x: &ndarray::Array4<f32>| {
            let data = TensorData::new(x.iter().copied().collect::<Vec<f32>>(), x.shape());
            Tensor::<4>::from_data(data, (&self.device, DType::F32))
        };
        let p = Prepared {
            q: up(&inputs.q),
            k: up(&inputs.k),
            v: up(&inputs.v),
            causal: shape.causal,
        };
        self.sync()?;
        Ok(p)
    }

    fn path(&self, _: &Prepared) -> String {
        "attention".into()
    }

    fn run(&self, p: &Prepared) -> Result<(), String> {
        let out = self.launch(p);
        self.sync()?;
        drop(out);
        Ok(())
    }

    fn read(&self, p: &Prepared) -> Result<Vec<f32>, String> {
        let data = self.launch(p).into_data();
        data.try_to_vec::<f32>()
            .map_err(|e| format!("burn read back: {e:?}"))
    }
}
