use nitro_markers::{Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    lr_scale: f64,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| ());
    let _: f32 = view.lr_scale.into();
    if view.lr_scale > 3.0f64 {}
}
