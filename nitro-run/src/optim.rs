//! Optimizers as configuration: which update rule is traced into the train
//! step, and the hyperparameters fed to it as scalar inputs each update (so a
//! schedule or sweep never recompiles).

/// The update rule and its hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// SGD with optional (Nesterov) momentum.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum (0 = plain SGD).
        momentum: f64,
        /// Nesterov momentum (structural: in the compile key).
        nesterov: bool,
    },
    /// Adam, or AdamW when `weight_decay` is non-zero (decoupled decay).
    Adam {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator guard.
        eps: f64,
        /// Decoupled weight decay (AdamW); 0 for Adam.
        weight_decay: f64,
    },
}

impl Optimizer {
    /// Plain SGD.
    pub fn sgd(lr: f64) -> Optimizer {
        Optimizer::Sgd {
            lr,
            momentum: 0.0,
            nesterov: false,
        }
    }

    /// SGD with momentum (`nesterov` selects Nesterov's variant).
    pub fn momentum(lr: f64, momentum: f64, nesterov: bool) -> Optimizer {
        Optimizer::Sgd {
            lr,
            momentum,
            nesterov,
        }
    }

    /// Adam with the usual defaults (0.9, 0.999, 1e-8).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// AdamW: Adam with decoupled weight decay.
    pub fn adamw(lr: f64, weight_decay: f64) -> Optimizer {
        match Optimizer::adam(lr) {
            Optimizer::Adam {
                beta1, beta2, eps, ..
            } => Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            },
            other => other,
        }
    }

    /// The base learning rate (what a schedule on `lr` replaces).
    pub fn lr(&self) -> f64 {
        match *self {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => lr,
        }
    }

    /// How many state slots each parameter carries (velocity; m and v).
    pub(crate) fn slots(&self) -> usize {
        match self {
            Optimizer::Sgd { .. } => 1,
            Optimizer::Adam { .. } => 2,
        }
    }

    /// What enters the compile key: the rule and its structural switches,
    /// never a hyperparameter value.
    pub(crate) fn structure(&self) -> String {
        match self {
            Optimizer::Sgd { nesterov, .. } => format!("sgd(nesterov={nesterov})"),
            Optimizer::Adam { .. } => "adam".into(),
        }
    }

    /// The names of [`Optimizer::hyper_values`], in order.
    pub(crate) fn hyper_names(&self) -> Vec<&'static str> {
        self.hyper_values(0.0, 0)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    /// The traced hyperparameter inputs, by name, with `lr` given (the
    /// scheduled value) and `step` the 1-based update count.
    pub(crate) fn hyper_values(&self, lr: f64, step: u64) -> Vec<(&'static str, f64)> {
        match *self {
            Optimizer::Sgd { momentum, .. } => vec![("lr", lr), ("momentum", momentum)],
            Optimizer::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => vec![
                ("lr", lr),
                ("beta1", beta1),
                ("beta2", beta2),
                ("eps", eps),
                ("weight_decay", weight_decay),
                ("step", step as f64),
            ],
        }
    }
}

impl Default for Optimizer {
    fn default() -> Self {
        Optimizer::adam(1e-3)
    }
}
