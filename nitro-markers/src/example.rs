//! A derived experiment, here so that `cargo doc` shows what the derive
//! generates: the marker table on [`MyExp`], the [`MyExpView`] compile view,
//! and the `ExperimentFields` impl.

use crate::{Device, Experiment, GraphConst, Host};

/// The seed's example experiment.
#[crate::marker_table]
#[derive(Experiment, Debug, Clone, PartialEq)]
pub struct MyExp {
    /// Structural: changes the emitted graph, so it bakes and is in the compile key.
    #[experiment(default = 128)]
    pub width: GraphConst<usize>,
    /// A traced INPUT: sweep it or schedule it without recompiling.
    #[experiment(default = 0.05)]
    pub smoothing: Device<f32>,
    /// Unmarked, therefore Host: driver-only and invisible to the tracer.
    #[experiment(default = 20)]
    pub max_epochs: usize,
    /// Host, written out for emphasis.
    #[experiment(default = "runs/myexp".to_string())]
    pub run_dir: Host<String>,
}
