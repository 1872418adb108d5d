use nitro_markers::{Device, Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    smoothing: Device<f32>,
    flag: bool,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| 1.0f32);
    // A Host bool as a condition: E0308, "expected `bool`, found
    // `StrippedHost<flag>`": the type names the field.
    if view.flag {
        let _ = view.smoothing;
    }
}
