use nitro_markers::{Device, Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    smoothing: Device<f32>,
    scale: f32,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| 1.0f32);
    // A Host field on the left of an operator: rustc reports E0369 and
    // names the field's marker type and `ReadInTrace` in a note.
    let _ = view.scale * 2.0f32;
}
