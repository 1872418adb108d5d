use nitro_markers::{Device, Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    smoothing: Device<f32>,
    images: Vec<u8>,
}

struct Tensor;
fn matmul(_: &Tensor, _: &Tensor) {}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| Tensor);
    matmul(&view.smoothing, &view.images);
}
