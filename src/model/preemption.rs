//! Preemption's victim choice (issue 33): of the running runs holding pool units, the set whose
//! stop frees what an urgent run lacks while losing the least work. Pure; the daemon supplies
//! the runs and carries the choice out.
//!
//! - Pools are named freely: a parallel slot can be a pool of its own (`slot`, one unit a run).
//! - A run's lost work is the units it holds (all pools; at least 1) × the time since its last
//!   resumable checkpoint, or since its attempt started when it has none or the checkpoint is
//!   older than the attempt (that work was redone already).
//! - Protected, never chosen: a run not preemptible; one whose priority is not lower than the
//!   urgent run's by at least the gap (equal priorities never, whatever the gap); one whose
//!   attempt started less than its `min_runtime` ago.
//! - The choice is exact: the least total lost work; among equal sets, the one whose most
//!   reluctant victim is least reluctant (lower priority, then the newer attempt, then the
//!   order given), then the next, and so on, and the fewer victims.
//! - A branch and bound over the candidates (the unprotected holders of a short pool), cheapest
//!   per unit first, bounded below by the units still short at the cheapest rate left. A box's
//!   few dozen candidates take well under a millisecond. Past [`MAX_STEPS`] steps (hundreds of
//!   candidates with many equal costs; about 60 ms) it answers with the best set found so
//!   far, never worse than the greedy set it starts from (cheapest per unit first until
//!   enough, then the unneeded ones dropped).

use std::collections::BTreeMap;

use super::Millis;

/// The most search steps before the best set found so far is taken.
pub const MAX_STEPS: u64 = 200_000;

/// A running run holding pool units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder<Id> {
    pub id: Id,
    pub priority: i64,
    pub preemptible: bool,
    /// When its current attempt started.
    pub started_at: Millis,
    /// When its last resumable checkpoint was recorded, if it has one.
    pub checkpoint_at: Option<Millis>,
    /// Units held, by pool.
    pub units: BTreeMap<String, u32>,
    /// How long an attempt runs before it may be preempted.
    pub min_runtime: Millis,
}

/// What the urgent run lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortage {
    /// Units it needs, by pool.
    pub needed: BTreeMap<String, u32>,
    /// Units free now, by pool.
    pub free: BTreeMap<String, u32>,
    /// The urgent run's priority.
    pub priority: i64,
    /// How much lower a victim's priority must be (at least 1 in effect).
    pub gap: i64,
    pub now: Millis,
}

/// Why a holder may not be preempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    NotPreemptible,
    /// Its priority is not lower by the gap.
    Priority,
    /// Its attempt started less than its `min_runtime` ago.
    TooYoung,
}

/// The victims chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice<Id> {
    /// In the order of the holders given.
    pub victims: Vec<Id>,
    /// Their lost work summed, in unit·milliseconds.
    pub lost_work: u128,
    /// The units their stop frees, by pool (every pool they hold).
    pub freed: BTreeMap<String, u32>,
}

impl<Id> Holder<Id> {
    /// Milliseconds of work a stop now would lose.
    pub fn lost_time(&self, now: Millis) -> Millis {
        let since = self.checkpoint_at.map_or(self.started_at, |at| at.max(self.started_at));
        now.saturating_sub(since).max(0)
    }

    /// Lost work in unit·milliseconds.
    pub fn lost_work(&self, now: Millis) -> u128 {
        let units: u128 = self.units.values().map(|u| *u as u128).sum();
        units.max(1) * self.lost_time(now) as u128
    }

    /// Why it may not be preempted for `shortage`, or None when it may.
    pub fn protection(&self, shortage: &Shortage) -> Option<Protection> {
        let lower_by = shortage.priority as i128 - self.priority as i128;
        if !self.preemptible {
            Some(Protection::NotPreemptible)
        } else if lower_by < 1 || lower_by < shortage.gap as i128 {
            Some(Protection::Priority)
        } else if (shortage.now as i128 - self.started_at as i128) < self.min_runtime as i128 {
            Some(Protection::TooYoung)
        } else {
            None
        }
    }
}

/// The set of `holders` to preempt for `shortage` at the least lost work; an empty set when
/// nothing is short; None when no set frees enough.
pub fn choose_victims<Id: Clone>(shortage: &Shortage, holders: &[Holder<Id>]) -> Option<Choice<Id>> {
    let pools: Vec<&String> = shortage
        .needed
        .iter()
        .filter(|(pool, needed)| **needed > shortage.free.get(*pool).copied().unwrap_or(0))
        .map(|(pool, _)| pool)
        .collect();
    let deficit: Vec<u64> = pools
        .iter()
        .map(|pool| (shortage.needed[*pool] - shortage.free.get(*pool).copied().unwrap_or(0)) as u64)
        .collect();
    // Candidates: unprotected holders of a short pool.
    let mut candidates: Vec<Candidate> = holders
        .iter()
        .enumerate()
        .filter(|(_, holder)| holder.protection(shortage).is_none())
        .map(|(place, holder)| Candidate {
            place,
            cost: holder.lost_work(shortage.now),
            gives: pools.iter().map(|pool| holder.units.get(*pool).copied().unwrap_or(0) as u64).collect(),
            rank: 0,
        })
        .filter(|candidate| candidate.gives.iter().any(|units| *units > 0))
        .collect();
    // Rank: 0 is the most willing victim (lowest priority, then newest attempt, then id order
    // as given).
    let mut by_willingness: Vec<usize> = (0..candidates.len()).collect();
    by_willingness.sort_by_key(|&i| {
        let holder = &holders[candidates[i].place];
        (holder.priority, std::cmp::Reverse(holder.started_at), candidates[i].place)
    });
    for (rank, &i) in by_willingness.iter().enumerate() {
        candidates[i].rank = rank;
    }
    // Cheapest per unit freed first: the greedy start and the search's bound are best so.
    candidates.sort_by(|a, b| {
        let rate = |c: &Candidate| c.cost as f64 / c.gives.iter().sum::<u64>() as f64;
        rate(a).total_cmp(&rate(b)).then(a.cost.cmp(&b.cost)).then(a.rank.cmp(&b.rank))
    });
    let mut search = Search::new(&candidates, deficit);
    let chosen = search.run()?;
    let mut places: Vec<usize> = chosen.iter().map(|&i| candidates[i].place).collect();
    places.sort_unstable();
    let mut freed = BTreeMap::new();
    for &place in &places {
        for (pool, units) in &holders[place].units {
            *freed.entry(pool.clone()).or_insert(0u32) += units;
        }
    }
    Some(Choice {
        victims: places.iter().map(|&place| holders[place].id.clone()).collect(),
        lost_work: chosen.iter().map(|&i| candidates[i].cost).sum(),
        freed,
    })
}

struct Candidate {
    /// Its index in the holders given.
    place: usize,
    cost: u128,
    /// Units of each short pool it frees.
    gives: Vec<u64>,
    rank: usize,
}

/// A set's order among sets: cost, then its ranks from the most reluctant victim down.
type Key = (u128, Vec<usize>);

struct Search<'a> {
    candidates: &'a [Candidate],
    /// What candidates i.. can free together, by short pool.
    reachable: Vec<Vec<u64>>,
    /// The least lost work per unit among candidates i.., by short pool: what the units still
    /// short cost at least.
    cheapest: Vec<Vec<f64>>,
    best: Option<(Key, Vec<usize>)>,
    steps: u64,
    chosen: Vec<usize>,
    deficit: Vec<u64>,
}

impl<'a> Search<'a> {
    fn new(candidates: &'a [Candidate], deficit: Vec<u64>) -> Search<'a> {
        let mut reachable = vec![vec![0u64; deficit.len()]; candidates.len() + 1];
        for i in (0..candidates.len()).rev() {
            let after: Vec<u64> =
                reachable[i + 1].iter().zip(&candidates[i].gives).map(|(a, g)| a + g).collect();
            reachable[i] = after;
        }
        let mut cheapest = vec![vec![f64::INFINITY; deficit.len()]; candidates.len() + 1];
        for i in (0..candidates.len()).rev() {
            let per_unit = candidates[i]
                .gives
                .iter()
                .map(|&g| if g > 0 { candidates[i].cost as f64 / g as f64 } else { f64::INFINITY });
            let after: Vec<f64> = cheapest[i + 1].iter().zip(per_unit).map(|(a, c)| a.min(c)).collect();
            cheapest[i] = after;
        }
        Search { candidates, reachable, cheapest, best: None, steps: 0, chosen: Vec::new(), deficit }
    }

    fn run(&mut self) -> Option<Vec<usize>> {
        if self.deficit.iter().zip(&self.reachable[0]).any(|(need, can)| can < need) {
            return None;
        }
        let greedy = self.greedy();
        self.offer(&greedy);
        let mut remaining = self.deficit.clone();
        self.branch(0, 0, &mut remaining);
        self.best.take().map(|(_, set)| set)
    }

    fn key(&self, set: &[usize]) -> Key {
        let cost = set.iter().map(|&i| self.candidates[i].cost).sum();
        let mut ranks: Vec<usize> = set.iter().map(|&i| self.candidates[i].rank).collect();
        ranks.sort_unstable_by(|a, b| b.cmp(a));
        (cost, ranks)
    }

    fn offer(&mut self, set: &[usize]) {
        let key = self.key(set);
        if self.best.as_ref().is_none_or(|(best, _)| key < *best) {
            self.best = Some((key, set.to_vec()));
        }
    }

    /// The cheapest candidates first until enough is freed, then the unneeded ones dropped
    /// (the dearest first).
    fn greedy(&self) -> Vec<usize> {
        let mut remaining = self.deficit.clone();
        let mut set = Vec::new();
        for (i, candidate) in self.candidates.iter().enumerate() {
            if remaining.iter().all(|r| *r == 0) {
                break;
            }
            if candidate.gives.iter().zip(&remaining).any(|(give, need)| *give > 0 && *need > 0) {
                set.push(i);
                for (need, give) in remaining.iter_mut().zip(&candidate.gives) {
                    *need = need.saturating_sub(*give);
                }
            }
        }
        for at in (0..set.len()).rev() {
            let without: Vec<usize> =
                set.iter().enumerate().filter(|(j, _)| *j != at).map(|(_, i)| *i).collect();
            if self.frees_enough(&without) {
                set = without;
            }
        }
        set
    }

    fn frees_enough(&self, set: &[usize]) -> bool {
        (0..self.deficit.len()).all(|pool| {
            set.iter().map(|&i| self.candidates[i].gives[pool]).sum::<u64>() >= self.deficit[pool]
        })
    }

    /// Candidates from `next` on, with `cost` spent and `remaining` still short.
    fn branch(&mut self, next: usize, cost: u128, remaining: &mut Vec<u64>) {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return;
        }
        if let Some(((best_cost, best_ranks), _)) = &self.best {
            // Each short pool alone costs at least its units at the cheapest rate left. Costs
            // are integers: the margins only absorb float rounding.
            let floor = (0..remaining.len())
                .map(|pool| remaining[pool] as f64 * self.cheapest[next][pool])
                .filter(|bound| bound.is_finite())
                .fold(0.0, f64::max);
            let (lower, best) = (cost as f64 + floor, *best_cost as f64);
            if cost > *best_cost || lower > best * (1.0 + 1e-12) + 1e-6 {
                return;
            }
            // At best a tie, which a set with a more reluctant victim than the best's loses.
            let worst = self.chosen.iter().map(|&i| self.candidates[i].rank).max();
            if lower >= best * (1.0 - 1e-12) - 1e-6 && worst > best_ranks.first().copied() {
                return;
            }
        }
        if remaining.iter().all(|r| *r == 0) {
            let set = self.chosen.clone();
            self.offer(&set);
            return;
        }
        if next == self.candidates.len()
            || remaining.iter().zip(&self.reachable[next]).any(|(need, can)| can < need)
        {
            return;
        }
        let candidate = &self.candidates[next];
        if candidate.gives.iter().zip(remaining.iter()).any(|(give, need)| *give > 0 && *need > 0) {
            let before = remaining.clone();
            for (need, give) in remaining.iter_mut().zip(&candidate.gives) {
                *need = need.saturating_sub(*give);
            }
            self.chosen.push(next);
            self.branch(next + 1, cost + candidate.cost, remaining);
            self.chosen.pop();
            *remaining = before;
        }
        self.branch(next + 1, cost, remaining);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: Millis = 60_000;

    fn holder(
        id: &str,
        priority: i64,
        gpus: u32,
        started_min_ago: i64,
        checkpoint_min_ago: Option<i64>,
    ) -> Holder<String> {
        let now = 1_000 * MIN;
        Holder {
            id: id.to_string(),
            priority,
            preemptible: true,
            started_at: now - started_min_ago * MIN,
            checkpoint_at: checkpoint_min_ago.map(|ago| now - ago * MIN),
            units: BTreeMap::from([("gpu".to_string(), gpus)]),
            min_runtime: 10 * MIN,
        }
    }

    fn short(gpus: u32, free: u32, priority: i64) -> Shortage {
        Shortage {
            needed: BTreeMap::from([("gpu".to_string(), gpus)]),
            free: BTreeMap::from([("gpu".to_string(), free)]),
            priority,
            gap: 1,
            now: 1_000 * MIN,
        }
    }

    fn victims(shortage: &Shortage, holders: &[Holder<String>]) -> Option<Vec<String>> {
        choose_victims(shortage, holders).map(|choice| choice.victims)
    }

    #[test]
    fn the_run_that_checkpointed_last_loses_least() {
        let holders =
            [holder("a", 0, 1, 120, Some(30)), holder("b", 0, 1, 120, Some(2)), holder("c", 0, 1, 60, None)];
        let choice = choose_victims(&short(1, 0, 10), &holders).unwrap();
        assert_eq!(choice.victims, ["b"]);
        assert_eq!(choice.lost_work, 2 * MIN as u128);
        assert_eq!(choice.freed, BTreeMap::from([("gpu".to_string(), 1)]));
    }

    #[test]
    fn victims_are_chosen_as_a_set_not_one_by_one() {
        // Two 1-unit runs that lost 5 min each (10 unit·min) beat one 2-unit run that lost 6
        // (12), though the 2-unit run alone is the fewest victims.
        let holders = [
            holder("big", 0, 2, 60, Some(6)),
            holder("x", 0, 1, 60, Some(5)),
            holder("y", 0, 1, 60, Some(5)),
        ];
        assert_eq!(victims(&short(2, 0, 10), &holders).unwrap(), ["x", "y"]);
        // One free unit: only one more is needed, and the cheapest 1-unit run suffices.
        assert_eq!(victims(&short(2, 1, 10), &holders).unwrap(), ["x"]);
    }

    #[test]
    fn table() {
        let young = holder("young", 0, 1, 5, None);
        let mut fixed = holder("fixed", 0, 1, 60, Some(1));
        fixed.preemptible = false;
        let peer = holder("peer", 10, 1, 60, Some(1));
        let close = holder("close", 9, 1, 60, Some(1));
        let old_checkpoint = holder("old-checkpoint", 0, 1, 20, Some(50));
        type Case = (&'static str, Shortage, Vec<Holder<String>>, Option<Vec<&'static str>>);
        let cases: Vec<Case> = vec![
            ("nothing short: no victim", short(1, 1, 10), vec![holder("a", 0, 1, 60, None)], Some(vec![])),
            ("protected: too young", short(1, 0, 10), vec![young.clone()], None),
            ("protected: not preemptible", short(1, 0, 10), vec![fixed.clone()], None),
            ("protected: equal priority", short(1, 0, 10), vec![peer.clone()], None),
            ("lower by 1 with gap 1", short(1, 0, 10), vec![close.clone()], Some(vec!["close"])),
            ("lower by 1 with gap 2", Shortage { gap: 2, ..short(1, 0, 10) }, vec![close.clone()], None),
            (
                "equal priority even with gap 0",
                Shortage { gap: 0, ..short(1, 0, 10) },
                vec![peer.clone()],
                None,
            ),
            (
                "not enough units anywhere",
                short(3, 0, 10),
                vec![holder("a", 0, 1, 60, None), young.clone()],
                None,
            ),
            (
                "a checkpoint older than the attempt counts from the attempt",
                short(1, 0, 10),
                vec![old_checkpoint, holder("b", 0, 1, 60, Some(25))],
                Some(vec!["old-checkpoint"]),
            ),
            (
                "equal loss: the lower priority",
                short(1, 0, 10),
                vec![holder("p3", 3, 1, 60, Some(5)), holder("p1", 1, 1, 60, Some(5))],
                Some(vec!["p1"]),
            ),
            (
                "equal loss and priority: the newer attempt",
                short(1, 0, 10),
                vec![holder("older", 1, 1, 90, Some(5)), holder("newer", 1, 1, 60, Some(5))],
                Some(vec!["newer"]),
            ),
            (
                "a run holding no short unit is never chosen",
                short(1, 0, 10),
                vec![
                    Holder {
                        units: BTreeMap::from([("cpu".to_string(), 4)]),
                        ..holder("cpu", 0, 0, 60, Some(0))
                    },
                    holder("gpu", 0, 1, 60, Some(30)),
                ],
                Some(vec!["gpu"]),
            ),
        ];
        for (name, shortage, holders, want) in cases {
            let want = want.map(|ids| ids.into_iter().map(str::to_string).collect::<Vec<_>>());
            assert_eq!(victims(&shortage, &holders), want, "{name}");
        }
    }

    #[test]
    fn two_pools_short_at_once() {
        let both = |id: &str, gpus: u32, cpus: u32, ago: i64| Holder {
            units: BTreeMap::from([("gpu".to_string(), gpus), ("cpu".to_string(), cpus)]),
            ..holder(id, 0, 0, 60, Some(ago))
        };
        let holders = [both("g", 1, 0, 1), both("c", 0, 8, 1), both("gc", 1, 8, 3)];
        let shortage = Shortage {
            needed: BTreeMap::from([("gpu".to_string(), 1), ("cpu".to_string(), 8)]),
            free: BTreeMap::new(),
            ..short(0, 0, 10)
        };
        // g + c lose 1 + 8 unit·min; gc loses 9 × 3.
        assert_eq!(victims(&shortage, &holders).unwrap(), ["g", "c"]);
    }

    #[test]
    fn many_candidates_answer_quickly() {
        let holders: Vec<Holder<String>> = (0..300)
            .map(|i| holder(&format!("r{i}"), 0, 1 + (i % 3) as u32, 100, Some((i % 17) as i64 + 1)))
            .collect();
        let choice = choose_victims(&short(40, 0, 10), &holders).unwrap();
        let freed: u32 = choice.freed["gpu"];
        assert!(freed >= 40, "{freed}");
    }

    fn arbitrary_holder() -> impl Strategy<Value = Holder<String>> {
        (0i64..4, any::<bool>(), 0i64..120, proptest::option::of(0i64..120), 0u32..4, 0u32..3, 0i64..30)
            .prop_map(|(priority, preemptible, started_ago, checkpoint_ago, gpus, cpus, min_runtime)| {
                Holder {
                    id: String::new(),
                    priority,
                    preemptible,
                    started_at: 1_000 * MIN - started_ago * MIN,
                    checkpoint_at: checkpoint_ago.map(|ago| 1_000 * MIN - ago * MIN),
                    units: BTreeMap::from([("gpu".to_string(), gpus), ("cpu".to_string(), cpus)]),
                    min_runtime: min_runtime * MIN,
                }
            })
    }

    proptest! {
        #[test]
        fn the_choice_frees_enough_and_no_cheaper_set_exists(
            mut holders in proptest::collection::vec(arbitrary_holder(), 0..9),
            gpus in 0u32..6, cpus in 0u32..4, free_gpus in 0u32..2, priority in 0i64..5, gap in 0i64..3,
        ) {
            for (i, holder) in holders.iter_mut().enumerate() {
                holder.id = format!("r{i}");
            }
            let shortage = Shortage {
                needed: BTreeMap::from([("gpu".to_string(), gpus), ("cpu".to_string(), cpus)]),
                free: BTreeMap::from([("gpu".to_string(), free_gpus)]),
                priority,
                gap,
                now: 1_000 * MIN,
            };
            let enough = |set: &[usize]| {
                shortage.needed.iter().all(|(pool, needed)| {
                    let freed: u32 = set.iter().map(|&i| holders[i].units.get(pool).copied().unwrap_or(0)).sum();
                    freed + shortage.free.get(pool).copied().unwrap_or(0) >= *needed
                })
            };
            let eligible: Vec<usize> = (0..holders.len()).filter(|&i| holders[i].protection(&shortage).is_none()).collect();
            // A set's order: its cost, then its victims from the most reluctant down.
            let key = |set: &[usize]| {
                let cost = set.iter().map(|&i| holders[i].lost_work(shortage.now)).sum::<u128>();
                let mut reluctance: Vec<_> =
                    set.iter().map(|&i| (holders[i].priority, std::cmp::Reverse(holders[i].started_at), i)).collect();
                reluctance.sort_unstable_by(|a, b| b.cmp(a));
                (cost, reluctance)
            };
            let mut best = None;
            for mask in 0u32..(1 << eligible.len()) {
                let set: Vec<usize> = eligible.iter().enumerate().filter(|(bit, _)| mask & (1 << bit) != 0).map(|(_, i)| *i).collect();
                if enough(&set) && best.as_ref().is_none_or(|(best_key, _)| key(&set) < *best_key) {
                    best = Some((key(&set), set));
                }
            }
            let cheapest = best.as_ref().map(|((cost, _), _)| *cost);
            let choice = choose_victims(&shortage, &holders);
            prop_assert_eq!(choice.as_ref().map(|c| c.lost_work), cheapest);
            if let Some(choice) = choice {
                let set: Vec<usize> = choice.victims.iter().map(|id| holders.iter().position(|h| &h.id == id).unwrap()).collect();
                prop_assert!(enough(&set));
                prop_assert!(set.iter().all(|&i| holders[i].protection(&shortage).is_none()));
                let cost: u128 = set.iter().map(|&i| holders[i].lost_work(shortage.now)).sum();
                prop_assert_eq!(cost, choice.lost_work);
                let best_set = best.map(|(_, set)| set).unwrap_or_default();
                prop_assert_eq!(set, best_set, "ties go to the lower priority, then the newer attempt");
            }
        }
    }
}
