use nitro_markers::{Device, Experiment, ExperimentFields, GraphConst};

#[derive(Experiment)]
struct MyExp {
    width: GraphConst<usize>,
    smoothing: Device<f32>,
    max_epochs: usize,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| 1.0f32);
    // Traced code reading a Host field.
    let _ = view.smoothing * view.max_epochs;
    let _ = view.max_epochs * 2.0f32;
}
