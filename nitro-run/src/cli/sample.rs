//! The `sample` command's pieces: the handle as a sampler's model, one
//! sample through the experiment's hook, and the `--sweep` argument. The
//! command itself (arguments, the sweep loop, the cache counters) is in
//! `cli`.

use nitro_data::Batch;

use super::Error;
use crate::experiment::Experiment;
use crate::handle::Nitro;

/// The Nitro handle as a sampler's model: its predict program.
impl<E: Experiment> crate::experiment::Predictor<E> for Nitro<E> {
    fn experiment(&self) -> &E {
        Nitro::experiment(self)
    }
    fn predict_batch(&mut self, batch: &Batch) -> Result<crate::HostOutputs, crate::HookError> {
        Ok(self.predict(batch)?)
    }
}

pub(super) fn sample_once<E: Experiment>(
    n: &mut Nitro<E>,
    request: &crate::experiment::SampleRequest,
) -> Result<String, Error> {
    E::sample(n, request).map_err(|source| -> Error {
        Box::new(crate::RunError::Hook {
            hook: "sample",
            source,
        })
    })
}

/// `FIELD=V1,V2,..` of `--sweep`.
pub(super) fn parse_sweep(text: &str) -> Result<(String, Vec<f32>), Error> {
    let bad = || {
        format!(
            "--sweep `{text}`: expected FIELD=V1,V2,.. with numbers, e.g. temperature=0.5,0.8,1.2"
        )
    };
    let (field, values) = text.split_once('=').ok_or_else(bad)?;
    let values: Vec<f32> = values
        .split(',')
        .map(|v| v.trim().parse::<f32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad())?;
    if field.is_empty() || values.is_empty() {
        return Err(bad().into());
    }
    Ok((field.to_string(), values))
}
