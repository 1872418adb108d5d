use nitro_markers::{Experiment, ExperimentFields};

#[derive(Experiment)]
struct MyExp {
    images: Vec<u8>,
}

fn main() {
    let e = MyExp::defaults();
    let view = e.compile_view(|_| ());
    let _ = format!("{}", view.images);
    let _ = view.images.len();
}
