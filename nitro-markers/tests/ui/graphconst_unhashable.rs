use std::sync::Mutex;

use nitro_markers::GraphConst;

struct MyExp {
    counter: GraphConst<Mutex<u32>>,
    raw: GraphConst<*const f32>,
}

fn main() {}
