//! Which checkpoints a store keeps: the last N by step, plus the best M by
//! one metric. A pure function, so the policy is tested without files.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Whether a smaller or a larger metric value is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Goal {
    /// Smaller is better (a loss).
    Min,
    /// Larger is better (an accuracy).
    Max,
}

/// Keep the best `keep` checkpoints ranked by `metric`.
#[derive(Debug, Clone, PartialEq)]
pub struct BestBy {
    /// Metric name; must be one of the store's known metrics.
    pub metric: String,
    /// Min or max.
    pub goal: Goal,
    /// How many best checkpoints to keep (besides the last N).
    pub keep: usize,
}

/// Steps ordered best first by `best.metric`. Checkpoints without the
/// metric, or with a NaN value, never rank; ties go to the earlier step.
pub(crate) fn rank(steps: &BTreeMap<u64, BTreeMap<String, f64>>, best: &BestBy) -> Vec<u64> {
    let mut ranked: Vec<(u64, f64)> = steps
        .iter()
        .filter_map(|(&s, m)| m.get(&best.metric).map(|&v| (s, v)))
        .filter(|(_, v)| !v.is_nan())
        .collect();
    ranked.sort_by(|a, b| {
        let by_value = match best.goal {
            Goal::Min => a.1.total_cmp(&b.1),
            Goal::Max => b.1.total_cmp(&a.1),
        };
        by_value.then(a.0.cmp(&b.0))
    });
    ranked.into_iter().map(|(s, _)| s).collect()
}

/// The steps to keep among `steps` (step -> metrics).
pub(crate) fn keep_set(
    steps: &BTreeMap<u64, BTreeMap<String, f64>>,
    keep_last: usize,
    best: Option<&BestBy>,
) -> BTreeSet<u64> {
    let mut keep: BTreeSet<u64> = steps.keys().rev().take(keep_last).copied().collect();
    if let Some(best) = best {
        keep.extend(rank(steps, best).into_iter().take(best.keep));
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(losses: &[(u64, f64)]) -> BTreeMap<u64, BTreeMap<String, f64>> {
        losses
            .iter()
            .map(|&(s, l)| (s, BTreeMap::from([("loss".to_string(), l)])))
            .collect()
    }

    #[test]
    fn last_n_and_best_m_union() {
        let s = steps(&[(1, 0.5), (2, 0.1), (3, 0.9), (4, 0.3), (5, 0.8)]);
        let best = BestBy {
            metric: "loss".into(),
            goal: Goal::Min,
            keep: 2,
        };
        assert_eq!(keep_set(&s, 2, Some(&best)), BTreeSet::from([2, 4, 5]));
        let best_max = BestBy {
            goal: Goal::Max,
            ..best
        };
        assert_eq!(keep_set(&s, 1, Some(&best_max)), BTreeSet::from([3, 5]));
        assert_eq!(keep_set(&s, 3, None), BTreeSet::from([3, 4, 5]));
    }

    #[test]
    fn nan_never_ranks_and_ties_go_to_earlier_step() {
        let s = steps(&[(1, f64::NAN), (2, 0.2), (3, 0.2)]);
        let best = BestBy {
            metric: "loss".into(),
            goal: Goal::Min,
            keep: 3,
        };
        assert_eq!(rank(&s, &best), vec![2, 3]);
    }
}
