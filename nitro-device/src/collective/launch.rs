//! Detection of an MPI launcher from the environment it sets, so that a
//! binary started by `mpirun -n N` joins a group of N and one started alone
//! runs as a world of one, without MPI.
//!
//! Open MPI sets `OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK}`; MPICH's Hydra
//! and Intel MPI set `PMI_{SIZE,RANK}` (and `MPI_LOCALRANKID`). Either
//! family is enough; Open MPI wins when both are present.

use super::CollectiveError;

/// What the launcher announced about this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The launcher family (`Open MPI`, `PMI`).
    pub launcher: &'static str,
    /// Processes in the job.
    pub world_size: usize,
    /// This process's rank.
    pub rank: usize,
    /// This process's rank among those on its host, when announced.
    pub local_rank: Option<usize>,
}

impl Launch {
    /// The launch the process environment describes, or `None` when no
    /// launcher started this process.
    pub fn from_env() -> Result<Option<Launch>, CollectiveError> {
        Launch::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Launch::from_env`] over any variable lookup (tests pass a map).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Launch>, CollectiveError> {
        let num = |var: &str| -> Result<Option<usize>, CollectiveError> {
            match get(var) {
                None => Ok(None),
                Some(v) => {
                    v.trim()
                        .parse::<usize>()
                        .map(Some)
                        .map_err(|_| CollectiveError::BadEnv {
                            var: var.to_string(),
                            value: v,
                        })
                }
            }
        };
        let families: [(&'static str, &str, &str, &str); 2] = [
            (
                "Open MPI",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_LOCAL_RANK",
            ),
            ("PMI", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"),
        ];
        for (launcher, size, rank, local) in families {
            if let Some(world_size) = num(size)? {
                let rank = num(rank)?.unwrap_or(0);
                if world_size == 0 || rank >= world_size {
                    return Err(CollectiveError::BadEnv {
                        var: size.to_string(),
                        value: format!("{world_size} (with rank {rank})"),
                    });
                }
                return Ok(Some(Launch {
                    launcher,
                    world_size,
                    rank,
                    local_rank: num(local)?,
                }));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(vars: &[(&str, &str)]) -> Result<Option<Launch>, CollectiveError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn no_launcher_is_none() {
        assert_eq!(launch(&[("HOME", "/root")]).unwrap(), None);
    }

    #[test]
    fn open_mpi_and_pmi_are_read() {
        let l = launch(&[
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("PMI_SIZE", "9"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.launcher, l.world_size, l.rank, l.local_rank),
            ("Open MPI", 3, 2, Some(1))
        );
        let l = launch(&[("PMI_SIZE", "4"), ("PMI_RANK", "3")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (l.launcher, l.world_size, l.rank, l.local_rank),
            ("PMI", 4, 3, None)
        );
    }

    #[test]
    fn garbage_is_named() {
        let e = launch(&[("OMPI_COMM_WORLD_SIZE", "two")]).unwrap_err();
        assert!(
            e.to_string().contains("OMPI_COMM_WORLD_SIZE=\"two\""),
            "{e}"
        );
        let e = launch(&[("PMI_SIZE", "2"), ("PMI_RANK", "2")]).unwrap_err();
        assert!(e.to_string().contains("PMI_SIZE"), "{e}");
    }
}
