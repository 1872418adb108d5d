//! `RoutingPlan`: which batch fields to transfer, resolved once at setup
//! from the fields each hook declares.
//!
//! A field no hook declares is never gathered, so it is never copied or
//! transferred. A required field the data lacks is an error here, at
//! setup, naming the field and the hook and listing what the data has.

use thiserror::Error;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::fields::Batch;

/// The batch fields one hook declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFields {
    /// Hook name, e.g. `forward` or `loss`.
    pub hook: String,
    /// Fields the hook cannot run without.
    pub required: Vec<String>,
    /// Fields the hook uses when present (`Option<_>` in the hook).
    pub optional: Vec<String>,
    /// The hook takes the whole batch, unchecked (every field is routed).
    pub whole_batch: bool,
}

impl HookFields {
    /// A hook declaring `required` and `optional` fields.
    pub fn new(hook: &str, required: &[&str], optional: &[&str]) -> Self {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Self {
            hook: hook.to_string(),
            required: own(required),
            optional: own(optional),
            whole_batch: false,
        }
    }

    /// A hook that receives every field, unchecked.
    pub fn whole_batch(hook: &str) -> Self {
        Self {
            whole_batch: true,
            ..Self::new(hook, &[], &[])
        }
    }
}

/// A required field is missing, found at setup.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RoutingError {
    /// A hook requires a field the data does not have.
    #[error(
        "hook `{hook}` requires batch field `{field}`, but the data has no such field; \
         the data has: {available}. Add `{field}` in build_data, rename the hook's \
         field to one of those, or declare it optional"
    )]
    MissingField {
        /// The missing field.
        field: String,
        /// The hook that requires it.
        hook: String,
        /// Comma-separated fields the data has.
        available: String,
    },
}

/// What one hook receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRoute {
    /// Hook name.
    pub hook: String,
    /// Fields it receives, in declaration order (required then optional).
    pub present: Vec<String>,
    /// Optional fields it declared that the data does not have.
    pub absent_optional: Vec<String>,
}

/// The resolved routing: fields to transfer and each hook's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingPlan {
    transfer: Vec<String>,
    hooks: Vec<HookRoute>,
}

impl RoutingPlan {
    /// Resolve hook declarations against the fields the data has.
    ///
    /// `transfer` keeps the data's field order. Errors on the first required
    /// field (in hook order) that the data lacks.
    pub fn resolve<S: AsRef<str>>(
        available: &[S],
        hooks: &[HookFields],
    ) -> Result<RoutingPlan, RoutingError> {
        let available: Vec<&str> = available.iter().map(AsRef::as_ref).collect();
        let has = |f: &str| available.contains(&f);
        let mut wanted = vec![false; available.len()];
        let mut routes = Vec::with_capacity(hooks.len());
        for h in hooks {
            if h.whole_batch {
                wanted.iter_mut().for_each(|w| *w = true);
                routes.push(HookRoute {
                    hook: h.hook.clone(),
                    present: available.iter().map(|s| s.to_string()).collect(),
                    absent_optional: Vec::new(),
                });
                continue;
            }
            if let Some(missing) = h.required.iter().find(|f| !has(f)) {
                return Err(RoutingError::MissingField {
                    field: missing.clone(),
                    hook: h.hook.clone(),
                    available: available.join(", "),
                });
            }
            let mut present = Vec::new();
            let mut absent_optional = Vec::new();
            for f in h.required.iter().chain(&h.optional) {
                match available.iter().position(|a| a == f) {
                    Some(i) => {
                        wanted[i] = true;
                        if !present.contains(f) {
                            present.push(f.clone());
                        }
                    }
                    None => absent_optional.push(f.clone()),
                }
            }
            routes.push(HookRoute {
                hook: h.hook.clone(),
                present,
                absent_optional,
            });
        }
        let transfer = available
            .iter()
            .zip(&wanted)
            .filter(|(_, w)| **w)
            .map(|(f, _)| f.to_string())
            .collect();
        Ok(RoutingPlan {
            transfer,
            hooks: routes,
        })
    }

    /// Resolve against a dataset's fields.
    pub fn for_dataset<D: Dataset + ?Sized>(
        data: &D,
        hooks: &[HookFields],
    ) -> Result<RoutingPlan, RoutingError> {
        Self::resolve(&data.field_names(), hooks)
    }

    /// Fields to gather and transfer, in the data's order.
    pub fn transfer(&self) -> Vec<&str> {
        self.transfer.iter().map(String::as_str).collect()
    }

    /// What `hook` receives.
    pub fn route(&self, hook: &str) -> Option<&HookRoute> {
        self.hooks.iter().find(|r| r.hook == hook)
    }

    /// Every hook's route, in declaration order.
    pub fn routes(&self) -> &[HookRoute] {
        &self.hooks
    }

    /// Gather the transferred fields of `indices`.
    pub fn gather<D: Dataset + ?Sized>(
        &self,
        data: &D,
        indices: &[usize],
    ) -> Result<Batch, DataError> {
        data.gather(indices, &self.transfer())
    }
}
