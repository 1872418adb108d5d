//! The layer contract: the [`Layer`] trait every layer implements (init of
//! parameters and state, forward in a context), the [`Params`] tree they
//! are stored in, and the path helpers that name their leaves
//! (`"0.weight"`, `"encoder.1.bias"`). It owns no layer; the layers live in
//! `layers`, `norm`, `attention` and `combinators`, which all depend on this
//! module and never on each other's internals.

use super::ctx::Ctx;
use super::init::InitRng;
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;
use std::collections::BTreeMap;

/// A params (or state) tree: path -> leaf, ordered by path.
pub type Params<T> = BTreeMap<String, T>;

/// A layer: initialises parameters (and state), applies to traced inputs.
pub trait Layer: Send + Sync {
    /// Write initial parameters under `prefix`. Fails only when a leaf
    /// cannot be allocated ([`GraphError::Alloc`], naming it).
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError>;

    /// Write initial state under `prefix` (most layers have none).
    fn init_state(&self, prefix: &str, state: &mut Params<Array>) -> Result<(), GraphError> {
        let _ = (prefix, state);
        Ok(())
    }

    /// Apply to `x` in context `cx`, reading parameters and state under
    /// `prefix` and replacing in `st` the state entries it updates.
    fn forward(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor;

    /// [`Layer::forward`] without a mode or state, for models of stateless
    /// layers (Dense, Conv2d, ...). A layer that depends on the mode
    /// (Dropout, BatchNorm) refuses it with a trace error naming the fix.
    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor {
        self.forward(&Ctx::unspecified(), params, &mut Params::new(), prefix, x)
    }
}

/// A layer's initial parameters and state from `seed`.
pub fn init_parts(
    layer: &dyn Layer,
    seed: u64,
) -> Result<(Params<Array>, Params<Array>), GraphError> {
    let mut params = Params::new();
    layer.init(&mut InitRng::new(seed), "", &mut params)?;
    let mut state = Params::new();
    layer.init_state("", &mut state)?;
    Ok((params, state))
}

/// `prefix.name` (or `name` at the root).
pub(crate) fn path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Parameter `prefix.name`; a missing one is a trace error listing the known ones.
pub(crate) fn param(params: &Params<Tensor>, x: &Tensor, prefix: &str, name: &str) -> Tensor {
    entry(params, "parameter", x, prefix, name)
}

/// Entry `prefix.name` of a params or state tree (`kind` names which).
pub(crate) fn entry(
    params: &Params<Tensor>,
    kind: &'static str,
    x: &Tensor,
    prefix: &str,
    name: &str,
) -> Tensor {
    let p = path(prefix, name);
    match params.get(&p) {
        Some(t) => t.clone(),
        None => {
            x.tracer().fail(GraphError::Unknown {
                kind,
                name: p,
                known: params.keys().cloned().collect::<Vec<_>>().join(", "),
            });
            x.clone()
        }
    }
}
