use nitro_markers::{Device, Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    smoothing: Device<f32>,
    scale: f32,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| 1.0f32);
    // Dereferencing a Host field: E0614 names `StrippedHost<scale>`.
    let _ = *view.scale;
}
