//! Setup, and nothing else: `build_data`, `derive`, `build_model`, device
//! conversion, routing, run values and the checks that belong at setup
//! (forward's outputs, schedule targets, metrics and the monitored metric
//! names). Compiles nothing.

use std::sync::Arc;

use nitro_data::{Dataset, HookFields, RoutingPlan, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::{Array, DType, TensorSpec};
use nitro_markers::{BatchFields, Recipe};

use crate::convert::{device_spec, device_to_array, program_dtype, signature};
use crate::dist::Distributed;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::{Frozen, Nitro};
use crate::layout::{Kind, Layout};
use crate::metric::Metric;
use crate::placement::Values;
use crate::programs::Programs;
use crate::report::{Probes, RunOverrides, RunValues};
use crate::run_state::RunState;

fn hook_fields<F: BatchFields<nitro_graph::Tensor>>(hook: &str) -> HookFields {
    if F::takes_whole_batch() {
        HookFields::whole_batch(hook)
    } else {
        HookFields::new(hook, F::required_fields(), F::optional_fields())
    }
}

impl<E: Experiment> Nitro<E> {
    /// Setup only: build_data, derive, build_model, device conversion,
    /// routing. Compiles nothing.
    pub fn new(e: E) -> Result<Self> {
        Self::setup(e, None, None, RunOverrides::default())
    }

    /// Setup from a recipe (`E::from_preset(..)`), recording its preset name.
    pub fn from_recipe(recipe: Recipe<E>) -> Result<Self> {
        Self::setup(
            recipe.experiment,
            recipe.preset,
            None,
            RunOverrides::default(),
        )
    }

    /// [`Nitro::from_recipe`] with driver-set run values (the CLI's
    /// `--run-dir`, `--max-epochs`, `--quiet`).
    pub fn from_recipe_with(recipe: Recipe<E>, overrides: RunOverrides) -> Result<Self> {
        Self::setup(recipe.experiment, recipe.preset, None, overrides)
    }

    /// Setup on an existing data collection (from [`Nitro::data`]): a
    /// rebuild loads no data. `derive` still runs.
    pub fn with_data(e: E, data: Arc<Splits>) -> Result<Self> {
        Self::setup(e, None, Some(data), RunOverrides::default())
    }

    fn setup(
        mut e: E,
        preset: Option<String>,
        data: Option<Arc<Splits>>,
        overrides: RunOverrides,
    ) -> Result<Self> {
        E::validate()?;
        let dist = Distributed::current()?;
        let data = match data {
            Some(d) => d,
            None => Arc::new(e.build_data(Some(&dist)).map_err(|source| RunError::Hook {
                hook: "build_data",
                source,
            })?),
        };
        // What derive writes is recomputed on every setup, resume included,
        // so a checkpoint never restores it.
        let before = e.device_values();
        e.derive(&data).map_err(|source| RunError::Hook {
            hook: "derive",
            source,
        })?;
        let derived: Vec<&'static str> = e
            .device_values()
            .into_iter()
            .zip(&before)
            .filter(|((_, now), (_, then))| now != then)
            .map(|((name, _), _)| name)
            .collect();
        let seed = e.seed();
        let parts = e
            .build_model(&mut InitRng::new(seed))
            .map_err(|source| RunError::Hook {
                hook: "build_model",
                source,
            })?;
        let dtype = parts
            .params
            .values()
            .next()
            .map_or(DType::F32, |a| a.dtype());
        let metrics = e.metrics();
        let train_metrics = e.train_metrics();
        let plan = RoutingPlan::for_dataset(
            &data.train,
            &[
                hook_fields::<E::Inputs>("forward"),
                hook_fields::<E::Targets>("loss"),
            ],
        )?;
        let present = |hook: &str| -> Vec<String> {
            plan.route(hook)
                .map(|r| r.present.clone())
                .unwrap_or_default()
        };
        let transfer: Vec<String> = plan.transfer().iter().map(|s| s.to_string()).collect();
        let field_specs = data.train.fields();
        let fields = transfer
            .iter()
            .filter_map(|f| {
                let spec = field_specs.iter().find(|s| &s.name == f)?;
                Some((
                    f.clone(),
                    TensorSpec::new(program_dtype(spec.dtype), &spec.sample_shape),
                ))
            })
            .collect();
        let device_values = e.device_values();
        let layout = Layout {
            params: parts
                .params
                .iter()
                .map(|(n, a)| (n.clone(), a.spec().clone()))
                .collect(),
            state: parts
                .state
                .iter()
                .map(|(n, a)| (n.clone(), a.spec().clone()))
                .collect(),
            device: device_values
                .iter()
                .map(|(n, v)| (*n, device_spec(v)))
                .collect(),
            fields,
            forward_fields: present("forward"),
            loss_fields: present("loss"),
            dtype,
        };
        let probes = Probes::of(&e);
        let run = RunValues::resolve(&e, preset, data.train.len(), dist.world_size(), &overrides)?;
        let scheduled = e.schedule();
        for (target, _) in &scheduled {
            check_schedule_target::<E>(&layout, target)?;
        }
        let programs = Programs::new(layout);
        // Forward's output rules are setup errors: trace it once, compile
        // nothing. Its graph hash is the model's structure in checkpoints.
        let width = run.batch_size;
        let (_, graph, returned) = programs.trace(&e, &parts.model, &Kind::Predict { width })?;
        let leaves: Vec<String> = returned
            .iter()
            .filter_map(|r| match r {
                crate::trace::Returned::Leaf { path, .. } => Some(path.clone()),
                _ => None,
            })
            .collect();
        let dataset_fields: Vec<String> = field_specs.iter().map(|s| s.name.clone()).collect();
        let mut metric_fields = vec![];
        for m in metrics.iter().chain(&train_metrics) {
            check_metric(m, &leaves, &dataset_fields, &mut metric_fields)?;
        }
        // A forward that cannot train on padded rows (BatchNorm's batch
        // statistics) is refused here, by name, not at the first step.
        if run.short_batch == nitro_data::ShortBatch::PadWithMask {
            let kind = Kind::train_step(&run, !train_metrics.is_empty());
            programs.trace(&e, &parts.model, &kind)?;
        }
        let structure = crate::structure::Structure::of(&graph, width);
        let opt = (0..run.optimizer.slots())
            .flat_map(|_| programs.layout.params.iter().map(|(_, s)| Array::zeros(s)))
            .collect();
        let stopper = e.early_stop();
        check_monitored(
            &run,
            stopper.as_deref(),
            &metrics,
            &train_metrics,
            data.val.is_some(),
        )?;
        tracing::info!(target: "nitro::setup", experiment = E::experiment_name(), train = data.train.len(), params = programs.layout.params.len(), "setup done");
        Ok(Nitro {
            model: parts.model,
            e,
            data,
            programs,
            frozen: Frozen {
                run,
                probes,
                transfer,
                metric_fields,
                metrics,
                train_metrics,
                scheduled,
                structure,
                derived,
            },
            progress: RunState::new(stopper),
            values: Values::on_cpu(
                parts.params.into_values().collect(),
                parts.state.into_values().collect(),
                opt,
                device_values
                    .iter()
                    .map(|(_, v)| device_to_array(v))
                    .collect(),
            ),
            reported: false,
            dist,
        })
    }
}

fn check_schedule_target<E: Experiment>(layout: &Layout, target: &str) -> Result<()> {
    if target == "lr" {
        return Ok(());
    }
    let scalar = TensorSpec::new(DType::F32, &[]);
    match layout.device.iter().find(|(n, _)| *n == target) {
        Some((_, spec)) if *spec == scalar => Ok(()),
        Some((_, spec)) => Err(RunError::Schedule {
            target: target.into(),
            reason: format!(
                "a schedule drives an f32 scalar; this Device field is {}",
                signature(spec)
            ),
        }),
        None => Err(RunError::Schedule {
            target: target.into(),
            reason: format!(
                "only `lr` and Device fields can be scheduled (Device fields: {})",
                E::device_fields().join(", ")
            ),
        }),
    }
}

/// A metric reads outputs forward returns and fields the dataset has;
/// anything else is an error naming it and listing what exists. The batch
/// fields it reads are gathered for it (on the host, never transferred).
fn check_metric(
    m: &Metric,
    leaves: &[String],
    fields: &[String],
    metric_fields: &mut Vec<String>,
) -> Result<()> {
    let reads = m.declared_reads();
    for output in &reads.outputs {
        if !leaves.contains(output) {
            return Err(RunError::MetricInput {
                metric: m.name.clone(),
                what: "output leaf",
                name: output.clone(),
                available: leaves.join(", "),
            });
        }
    }
    for field in &reads.fields {
        if !fields.contains(field) {
            return Err(RunError::MetricInput {
                metric: m.name.clone(),
                what: "batch field",
                name: field.clone(),
                available: fields.join(", "),
            });
        }
        if !metric_fields.contains(field) {
            metric_fields.push(field.clone());
        }
    }
    Ok(())
}

/// The early stopper and the best-checkpoint rule monitor metrics the run
/// reports.
fn check_monitored(
    run: &RunValues,
    stopper: Option<&dyn crate::stop::Stopper>,
    metrics: &[Metric],
    train_metrics: &[Metric],
    has_val: bool,
) -> Result<()> {
    let mut known: Vec<String> = vec!["loss".into()];
    known.extend(train_metrics.iter().map(|m| format!("train_{}", m.name)));
    if has_val {
        known.push("val_loss".into());
        known.extend(metrics.iter().map(|m| format!("val_{}", m.name)));
    }
    let unknown = |user: &'static str, metric: &str| RunError::UnknownMetric {
        user,
        metric: metric.into(),
        available: known.join(", "),
    };
    if let Some(s) = stopper {
        if !known.iter().any(|k| k == s.monitored()) {
            return Err(unknown("early_stop", s.monitored()));
        }
    }
    if let Some((metric, _, _)) = &run.checkpointer.best {
        if !known.iter().any(|k| k == metric) {
            return Err(unknown("checkpointer (best)", metric));
        }
    }
    Ok(())
}
