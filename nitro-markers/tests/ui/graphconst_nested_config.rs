use nitro_markers::{Experiment, GraphConst};

#[derive(Clone, Default)]
struct ModelCfg {
    width: usize,
    depth: usize,
}

#[derive(Experiment)]
struct MyExp {
    model: GraphConst<ModelCfg>,
}

fn main() {}
