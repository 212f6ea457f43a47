//! Where this process sits in a job: the environment a standard launcher sets (torchrun, Slurm
//! through torchrun or srun wrappers, `fulcrum train --nproc`): `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`.

/// This rank's place in a job of several processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world: usize,
    /// The rank on this machine (which GPU it uses).
    pub local_rank: usize,
    pub master_addr: String,
    pub master_port: u16,
}

/// A launcher variable is missing or malformed.
#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}={value:?}: {why}")]
pub struct LaunchError {
    pub name: &'static str,
    pub value: String,
    pub why: String,
}

impl Launch {
    /// The job described by the process environment; `None` when `WORLD_SIZE` is unset (a
    /// single process).
    pub fn from_env() -> Result<Option<Launch>, LaunchError> {
        Launch::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`Launch::from_env`], reading variables through `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, LaunchError> {
        let Some(world_text) = get("WORLD_SIZE") else {
            return Ok(None);
        };
        let number = |name: &'static str, text: String| -> Result<usize, LaunchError> {
            text.trim().parse::<usize>().map_err(|e| LaunchError {
                name,
                value: text.clone(),
                why: format!("not a non-negative integer ({e})"),
            })
        };
        let world = number("WORLD_SIZE", world_text.clone())?;
        if world == 0 {
            return Err(LaunchError {
                name: "WORLD_SIZE",
                value: world_text,
                why: "must be at least 1".into(),
            });
        }
        let required = |name: &'static str| {
            get(name).ok_or_else(|| LaunchError {
                name,
                value: String::new(),
                why: format!("unset, but WORLD_SIZE={world} asks for a job of several ranks"),
            })
        };
        let rank_text = required("RANK")?;
        let rank = number("RANK", rank_text.clone())?;
        if rank >= world {
            return Err(LaunchError {
                name: "RANK",
                value: rank_text,
                why: format!("must be below WORLD_SIZE={world}"),
            });
        }
        let local_rank = match get("LOCAL_RANK") {
            Some(t) => number("LOCAL_RANK", t)?,
            None => rank,
        };
        let master_addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let port_text = required("MASTER_PORT")?;
        let master_port = port_text.trim().parse::<u16>().map_err(|e| LaunchError {
            name: "MASTER_PORT",
            value: port_text.clone(),
            why: format!("not a port number ({e})"),
        })?;
        Ok(Some(Launch {
            rank,
            world,
            local_rank,
            master_addr,
            master_port,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Option<Launch>, LaunchError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_variables_make_a_launch_and_bad_ones_name_the_variable() {
        assert_eq!(parse(&[]).unwrap(), None);
        let l = parse(&[
            ("WORLD_SIZE", "16"),
            ("RANK", "9"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.world, l.local_rank), (9, 16, 1));
        assert_eq!((l.master_addr.as_str(), l.master_port), ("node0", 29500));
        let e = parse(&[("WORLD_SIZE", "2"), ("RANK", "2"), ("MASTER_PORT", "1")]).unwrap_err();
        assert_eq!(e.name, "RANK");
        let e = parse(&[("WORLD_SIZE", "two")]).unwrap_err();
        assert_eq!(e.name, "WORLD_SIZE");
        let e = parse(&[("WORLD_SIZE", "2"), ("RANK", "0")]).unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT"), "{e}");
        let e = parse(&[("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_PORT", "99999")]).unwrap_err();
        assert_eq!(e.name, "MASTER_PORT");
    }
}
