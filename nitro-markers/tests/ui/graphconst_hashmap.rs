use std::collections::HashMap;

use nitro_markers::{Experiment, GraphConst};

#[derive(Experiment)]
struct MyExp {
    vocab: GraphConst<HashMap<String, u32>>,
}

fn main() {}
