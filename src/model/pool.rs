//! Counted pools: a node's devices by pool (`gpu` → 0,1,2,3), what a run needs of them
//! (`gpu: 2`), and the pure choice of the units a claim takes. A unit held by a run is the
//! resource `NAME:UNIT` (`gpu:1`), the same word an exclusive label (`resources: [gpu:1]`)
//! holds, so the two never hand out one device twice.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The most units one pool lists, and the most any run may ask of one.
pub const MAX_UNITS: usize = 1024;
/// The most pools a node has, and the most a run may name.
pub const MAX_POOLS: usize = 32;
/// The pool whose units a stage also sees as `CUDA_VISIBLE_DEVICES`.
pub const GPU: &str = "gpu";
/// The prefix of the template values a run's units are given as (`pool.gpu` = "1,2").
pub const VAR_PREFIX: &str = "pool.";

/// A pool name: lowercase letters, digits and '_', starting with a letter (it becomes the
/// environment variable `LACHESIS_POOL_<NAME>`).
pub fn is_pool_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

const POOL_NAME_RULE: &str =
    "a pool name is 1 to 32 lowercase letters, digits or '_', starting with a letter";

/// A unit: what a device is called where it is used (an index, a GPU or MIG UUID).
fn is_unit(unit: &str) -> bool {
    (1..=64).contains(&unit.len()) && unit.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A `--pool` or `--needs` value that cannot be used; its message is one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("'{0}' is not NAME=UNITS (e.g. gpu=0,1,2,3 or gpu=auto)")]
    NotAssignment(String),
    #[error("'{0}': {POOL_NAME_RULE}")]
    BadName(String),
    #[error("pool '{pool}': '{unit}' is not a unit (1 to 64 letters, digits, '-', '_' or '.')")]
    BadUnit { pool: String, unit: String },
    #[error("pool '{pool}' lists unit '{unit}' twice")]
    Duplicate { pool: String, unit: String },
    #[error("pool '{0}' has no units")]
    Empty(String),
    #[error("pool '{pool}' has {count} units; at most {MAX_UNITS}")]
    TooManyUnits { pool: String, count: usize },
    #[error("pool '{0}' is given twice")]
    TwicePool(String),
    #[error("more than {MAX_POOLS} pools")]
    TooManyPools,
    #[error("pool '{0}' cannot be `auto`: only the gpu pool is found by itself (nvidia-smi -L)")]
    AutoNotGpu(String),
    #[error("'{0}' is not NAME=COUNT (e.g. gpu=2)")]
    NotNeed(String),
    #[error("'{text}': the count must be a number from 0 to {MAX_UNITS}")]
    BadCount { text: String },
    #[error("pool '{0}' is asked for twice")]
    TwiceNeed(String),
}

/// What `--pool NAME=…` gives: its units, or `auto` (the GPUs `nvidia-smi -L` lists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolUnits {
    Listed(Vec<String>),
    Auto,
}

/// One `--pool` value, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    pub name: String,
    pub units: PoolUnits,
}

impl FromStr for PoolSpec {
    type Err = PoolError;

    fn from_str(text: &str) -> Result<PoolSpec, PoolError> {
        let (name, units) =
            text.split_once('=').ok_or_else(|| PoolError::NotAssignment(crate::text::one_line(text)))?;
        let name = name.trim();
        if !is_pool_name(name) {
            return Err(PoolError::BadName(crate::text::one_line(name)));
        }
        let units = units.trim();
        if units == "auto" {
            if name != GPU {
                return Err(PoolError::AutoNotGpu(name.to_string()));
            }
            return Ok(PoolSpec { name: name.to_string(), units: PoolUnits::Auto });
        }
        let units: Vec<String> = units.split(',').map(|u| u.trim().to_string()).collect();
        let units = check_units(name, units)?;
        Ok(PoolSpec { name: name.to_string(), units: PoolUnits::Listed(units) })
    }
}

/// Units as a pool may hold them: at least one, each a unit, none twice, not too many.
fn check_units(pool: &str, units: Vec<String>) -> Result<Vec<String>, PoolError> {
    if units.is_empty() {
        return Err(PoolError::Empty(pool.to_string()));
    }
    if units.len() > MAX_UNITS {
        return Err(PoolError::TooManyUnits { pool: pool.to_string(), count: units.len() });
    }
    let mut seen = BTreeSet::new();
    for unit in &units {
        if !is_unit(unit) {
            return Err(PoolError::BadUnit { pool: pool.to_string(), unit: crate::text::one_line(unit) });
        }
        if !seen.insert(unit.as_str()) {
            return Err(PoolError::Duplicate { pool: pool.to_string(), unit: unit.clone() });
        }
    }
    Ok(units)
}

/// A node's pools: each name with its units, in the order they are handed out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pools(BTreeMap<String, Vec<String>>);

impl Pools {
    /// Pools from `--pool` values whose `auto` units were found (`gpus`, for the gpu pool).
    pub fn from_specs(specs: &[PoolSpec], gpus: Option<&[String]>) -> Result<Pools, PoolError> {
        if specs.len() > MAX_POOLS {
            return Err(PoolError::TooManyPools);
        }
        let mut pools = BTreeMap::new();
        for spec in specs {
            let units = match &spec.units {
                PoolUnits::Listed(units) => units.clone(),
                PoolUnits::Auto => check_units(&spec.name, gpus.unwrap_or_default().to_vec())?,
            };
            if pools.insert(spec.name.clone(), units).is_some() {
                return Err(PoolError::TwicePool(spec.name.clone()));
            }
        }
        Ok(Pools(pools))
    }

    /// Pools read back (from the home's pools file): checked as `--pool` values are.
    pub fn checked(self) -> Result<Pools, PoolError> {
        if self.0.len() > MAX_POOLS {
            return Err(PoolError::TooManyPools);
        }
        for (name, units) in &self.0 {
            if !is_pool_name(name) {
                return Err(PoolError::BadName(crate::text::one_line(name)));
            }
            check_units(name, units.clone())?;
        }
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<&[String]> {
        self.0.get(name).map(Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Vec<String>)> {
        self.0.iter()
    }

    /// Whether the pool `gpu` needs `nvidia-smi -L` to be known.
    pub fn wants_gpus(specs: &[PoolSpec]) -> bool {
        specs.iter().any(|s| s.units == PoolUnits::Auto)
    }

    /// Refuses needs no claim could meet: a pool these pools lack, or more units than it has.
    pub fn check(&self, needs: &Needs) -> Result<(), NeedsError> {
        for (name, &asked) in needs.iter() {
            if asked == 0 {
                continue;
            }
            match self.get(name) {
                None => {
                    let known: Vec<&str> = self.0.keys().map(String::as_str).collect();
                    let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                    return Err(NeedsError::UnknownPool { name: name.clone(), asked, known });
                }
                Some(units) if asked as usize > units.len() => {
                    return Err(NeedsError::TooLarge { name: name.clone(), asked, size: units.len() });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl fmt::Display for Pools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, u)| format!("{n}={}", u.join(","))).collect();
        f.write_str(&parts.join(" "))
    }
}

/// Needs that no claim could meet, refused at submission.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NeedsError {
    #[error(
        "needs {name}={asked}: the daemon has no pool '{name}' (its pools: {known}; start it with --pool {name}=…)"
    )]
    UnknownPool { name: String, asked: u32, known: String },
    #[error("needs {name}={asked}: pool '{name}' has {size} units")]
    TooLarge { name: String, asked: u32, size: usize },
}

/// What a run asks of each pool: a count of units (0 asks for none, and hides the pool's
/// units from its stages).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Needs(BTreeMap<String, u32>);

impl Needs {
    /// Needs from (name, count) pairs, each checked; a name twice is refused.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, u32)>) -> Result<Needs, PoolError> {
        let mut needs = BTreeMap::new();
        for (name, count) in pairs {
            if needs.insert(name.clone(), count).is_some() {
                return Err(PoolError::TwiceNeed(crate::text::one_line(&name)));
            }
        }
        Needs(needs).checked()
    }

    /// Checks names and counts (of a workflow's `needs:` or a request's body).
    pub fn checked(self) -> Result<Needs, PoolError> {
        if self.0.len() > MAX_POOLS {
            return Err(PoolError::TooManyPools);
        }
        for (name, &count) in &self.0 {
            if !is_pool_name(name) {
                return Err(PoolError::BadName(crate::text::one_line(name)));
            }
            if count as usize > MAX_UNITS {
                return Err(PoolError::BadCount { text: format!("{name}={count}") });
            }
        }
        Ok(self)
    }

    /// `self` with `over`'s counts in place of its own.
    pub fn overlaid(&self, over: &Needs) -> Needs {
        let mut needs = self.0.clone();
        needs.extend(over.0.iter().map(|(k, v)| (k.clone(), *v)));
        Needs(needs)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &u32)> {
        self.0.iter()
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }
}

impl fmt::Display for Needs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, c)| format!("{n}={c}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// One `--needs NAME=COUNT` value.
pub fn parse_need(text: &str) -> Result<(String, u32), PoolError> {
    let (name, count) =
        text.split_once('=').ok_or_else(|| PoolError::NotNeed(crate::text::one_line(text)))?;
    let name = name.trim();
    if !is_pool_name(name) {
        return Err(PoolError::BadName(crate::text::one_line(name)));
    }
    match count.trim().parse::<u32>() {
        Ok(count) if count as usize <= MAX_UNITS => Ok((name.to_string(), count)),
        _ => Err(PoolError::BadCount { text: crate::text::one_line(text) }),
    }
}

/// The units a run holds, by pool.
pub type Assignment = BTreeMap<String, Vec<String>>;

/// The resource a held unit is: `gpu:1`.
pub fn unit_resource(pool: &str, unit: &str) -> String {
    format!("{pool}:{unit}")
}

/// The units for `needs` out of `pools`, none of them in `held` (resources, `NAME:UNIT`): the
/// lowest free units of each pool, in the pool's order. None when a pool lacks enough free
/// units (or does not exist) for a count above 0.
pub fn assign(pools: &Pools, held: &BTreeSet<String>, needs: &Needs) -> Option<Assignment> {
    let mut assignment = Assignment::new();
    for (name, &count) in needs.iter() {
        let units: Vec<String> = if count == 0 {
            Vec::new()
        } else {
            let free = pools.get(name)?.iter().filter(|u| !held.contains(&unit_resource(name, u)));
            let units: Vec<String> = free.take(count as usize).cloned().collect();
            if units.len() < count as usize {
                return None;
            }
            units
        };
        assignment.insert(name.clone(), units);
    }
    Some(assignment)
}

/// The resources (`NAME:UNIT`) of an assignment.
pub fn resources(assignment: &Assignment) -> impl Iterator<Item = String> + '_ {
    assignment.iter().flat_map(|(name, units)| units.iter().map(move |u| unit_resource(name, u)))
}

/// Writes `assignment` into template values as `pool.NAME` = "1,2", in place of any others.
pub fn record(resolved: &mut BTreeMap<String, String>, assignment: &Assignment) {
    resolved.retain(|key, _| !key.starts_with(VAR_PREFIX));
    for (name, units) in assignment {
        resolved.insert(format!("{VAR_PREFIX}{name}"), units.join(","));
    }
}

/// The environment a stage gets for its run's units: `LACHESIS_POOL_<NAME>` for each pool it
/// asked of, and `CUDA_VISIBLE_DEVICES` for the gpu pool (over any value of the workflow's).
pub fn environ(resolved: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (key, value) in resolved {
        let Some(name) = key.strip_prefix(VAR_PREFIX) else { continue };
        env.push((format!("LACHESIS_POOL_{}", name.to_ascii_uppercase()), value.clone()));
        if name == GPU {
            env.push(("CUDA_VISIBLE_DEVICES".to_string(), value.clone()));
        }
    }
    env
}

/// The GPU indexes in `nvidia-smi -L` output: lines `GPU 0: NVIDIA A100 (UUID: GPU-…)`; MIG
/// lines and anything else are skipped.
pub fn gpus_listed(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("GPU ")?;
            let (index, _) = rest.split_once(':')?;
            let index = index.trim();
            (!index.is_empty() && index.chars().all(|c| c.is_ascii_digit())).then(|| index.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(text: &[&str]) -> Pools {
        let specs: Vec<PoolSpec> = text.iter().map(|t| t.parse().unwrap()).collect();
        Pools::from_specs(&specs, None).unwrap()
    }

    fn needs(pairs: &[(&str, u32)]) -> Needs {
        Needs::from_pairs(pairs.iter().map(|(n, c)| (n.to_string(), *c))).unwrap()
    }

    fn held(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pool_values_parse_units_and_auto() {
        let spec: PoolSpec = "gpu=0,1,2,3".parse().unwrap();
        assert_eq!(spec.name, "gpu");
        assert_eq!(spec.units, PoolUnits::Listed(vec!["0".into(), "1".into(), "2".into(), "3".into()]));
        assert_eq!("gpu=auto".parse::<PoolSpec>().unwrap().units, PoolUnits::Auto);
        let uuid: PoolSpec = "gpu=GPU-8f3a-01,MIG-2".parse().unwrap();
        assert_eq!(uuid.units, PoolUnits::Listed(vec!["GPU-8f3a-01".into(), "MIG-2".into()]));
        assert_eq!(pools(&["gpu=0,1", "nvme=a"]).to_string(), "gpu=0,1 nvme=a");
    }

    #[test]
    fn bad_pool_values_are_one_line_errors() {
        for (text, want) in [
            ("gpu", "is not NAME=UNITS"),
            ("=0,1", "pool name"),
            ("GPU=0", "pool name"),
            ("g-pu=0", "pool name"),
            ("gpu=", "is not a unit"),
            ("gpu=0,,1", "is not a unit"),
            ("gpu=0,1,0", "lists unit '0' twice"),
            ("gpu=0 1", "is not a unit"),
            ("gpu=a\nb", "is not a unit"),
            ("nvme=auto", "only the gpu pool"),
        ] {
            let err = text.parse::<PoolSpec>().unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{text:?}: {err}");
        }
        let many = format!("gpu={}", (0..=MAX_UNITS).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        assert!(many.parse::<PoolSpec>().unwrap_err().to_string().contains("at most 1024"));
        let twice: Vec<PoolSpec> = ["gpu=0", "gpu=1"].iter().map(|t| t.parse().unwrap()).collect();
        assert_eq!(Pools::from_specs(&twice, None), Err(PoolError::TwicePool("gpu".into())));
        let auto = vec!["gpu=auto".parse::<PoolSpec>().unwrap()];
        assert!(Pools::from_specs(&auto, Some(&[])).is_err(), "auto that found nothing");
        let found = Pools::from_specs(&auto, Some(&["0".into(), "1".into()])).unwrap();
        assert_eq!(found.get("gpu").unwrap(), ["0", "1"]);
    }

    #[test]
    fn needs_parse_counts_and_refuse_bad_forms() {
        assert_eq!(parse_need("gpu=2"), Ok(("gpu".into(), 2)));
        assert_eq!(parse_need(" gpu = 0 "), Ok(("gpu".into(), 0)));
        for text in ["gpu", "gpu=-1", "gpu=two", "gpu=1025", "Gpu=1", "gpu=99999999999999999999"] {
            let err = parse_need(text).unwrap_err().to_string();
            assert!(!err.contains('\n') && !err.is_empty(), "{text:?}: {err}");
        }
        assert_eq!(
            Needs::from_pairs([("gpu".into(), 1), ("gpu".into(), 2)]),
            Err(PoolError::TwiceNeed("gpu".into()))
        );
        let base = needs(&[("gpu", 2), ("nvme", 1)]);
        assert_eq!(base.overlaid(&needs(&[("gpu", 1)])), needs(&[("gpu", 1), ("nvme", 1)]));
    }

    #[test]
    fn needs_beyond_the_pools_are_refused_with_pool_asked_and_size() {
        let pools = pools(&["gpu=0,1,2,3"]);
        assert_eq!(pools.check(&needs(&[("gpu", 4)])), Ok(()));
        assert_eq!(pools.check(&needs(&[("tpu", 0)])), Ok(()), "asking none of a pool asks nothing");
        let err = pools.check(&needs(&[("gpu", 5)])).unwrap_err();
        assert_eq!(err.to_string(), "needs gpu=5: pool 'gpu' has 4 units");
        let err = pools.check(&needs(&[("tpu", 1)])).unwrap_err().to_string();
        assert!(err.contains("no pool 'tpu'") && err.contains("its pools: gpu"), "{err}");
        let err = Pools::default().check(&needs(&[("gpu", 1)])).unwrap_err().to_string();
        assert!(err.contains("its pools: none"), "{err}");
    }

    #[test]
    fn assign_takes_the_lowest_free_units_or_nothing() {
        let pools = pools(&["gpu=0,1,2,3", "nvme=a,b"]);
        // (held, needs, units taken): "gpu=1,2 nvme=a" for an assignment, None for no claim.
        let cases = [
            ("", "gpu=1", Some("gpu=0")),
            ("", "gpu=4", Some("gpu=0,1,2,3")),
            ("gpu:0", "gpu=2", Some("gpu=1,2")),
            ("gpu:1 gpu:2", "gpu=2", Some("gpu=0,3")),
            ("gpu:0 gpu:1 gpu:2", "gpu=2", None),
            ("gpu:0 gpu:1 gpu:2 gpu:3", "gpu=1", None),
            ("gpu:0 gpu:1 gpu:2 gpu:3", "gpu=0", Some("gpu=")),
            ("", "gpu=5", None),
            ("", "tpu=1", None),
            ("port:8000", "gpu=1 nvme=2", Some("gpu=0 nvme=a,b")),
            ("nvme:a", "gpu=1 nvme=2", None),
            ("", "", Some("")),
        ];
        for (held_now, asked, want) in cases {
            let asked = Needs::from_pairs(asked.split_whitespace().map(|n| parse_need(n).unwrap())).unwrap();
            let got = assign(&pools, &held(&held_now.split_whitespace().collect::<Vec<_>>()), &asked);
            let got = got
                .map(|a| a.iter().map(|(n, u)| format!("{n}={}", u.join(","))).collect::<Vec<_>>().join(" "));
            assert_eq!(got.as_deref(), want, "held {held_now:?}, needs {asked}");
        }
    }

    #[test]
    fn an_assignment_becomes_template_values_and_the_environment() {
        let mut resolved = BTreeMap::from([
            ("run_id".to_string(), "r1".to_string()),
            ("pool.gpu".to_string(), "9".to_string()),
            ("pool.old".to_string(), "x".to_string()),
        ]);
        let assignment: Assignment =
            BTreeMap::from([("gpu".into(), vec!["1".into(), "2".into()]), ("nvme".into(), vec![])]);
        record(&mut resolved, &assignment);
        assert_eq!(resolved["pool.gpu"], "1,2");
        assert!(!resolved.contains_key("pool.old"), "an earlier attempt's units are gone");
        assert_eq!(resolved["pool.nvme"], "");
        let held: Vec<String> = resources(&assignment).collect();
        assert_eq!(held, ["gpu:1", "gpu:2"]);
        let env = environ(&resolved);
        assert!(env.contains(&("CUDA_VISIBLE_DEVICES".into(), "1,2".into())));
        assert!(env.contains(&("LACHESIS_POOL_GPU".into(), "1,2".into())));
        assert!(env.contains(&("LACHESIS_POOL_NVME".into(), String::new())));
        assert!(environ(&BTreeMap::new()).is_empty(), "a run that asks nothing gets nothing");
    }

    #[test]
    fn nvidia_smi_lines_give_gpu_indexes() {
        let out = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5a1c)\n  MIG 1g.10gb Device 0: (UUID: MIG-1)\nGPU 1: NVIDIA A100 (UUID: GPU-77)\nNo devices were found\nGPU x: odd\n";
        assert_eq!(gpus_listed(out), ["0", "1"]);
        assert!(gpus_listed("").is_empty());
    }
}
