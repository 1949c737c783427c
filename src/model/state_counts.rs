//! How many runs (or tests) are in each state: what the dashboard's runs page, the report, the
//! metrics endpoint and the figures count by. One value, keyed by the state's type, so a count
//! is never looked up by a misspelt name.

use std::fmt;
use std::str::FromStr;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{RunState, TestState, UnknownState};

/// A state a noun can be counted in: its name is what the store keeps and JSON shows.
pub trait CountedState: Copy + Eq + FromStr<Err = UnknownState> + fmt::Debug + 'static {
    fn name(self) -> &'static str;
}

impl CountedState for RunState {
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl CountedState for TestState {
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// Counts by state, only states with some; in the order of the states' names (as the store
/// sorts them), which is the order they are shown and serialised in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateCounts<S: CountedState> {
    by_name: Vec<(S, i64)>,
}

impl<S: CountedState> Default for StateCounts<S> {
    fn default() -> Self {
        StateCounts { by_name: Vec::new() }
    }
}

impl<S: CountedState> StateCounts<S> {
    /// Counts read as the store keeps them, by name; a name no state has is an error.
    pub fn from_names<N: AsRef<str>>(rows: impl IntoIterator<Item = (N, i64)>) -> Result<Self, UnknownState> {
        let mut counts = StateCounts::default();
        for (name, n) in rows {
            counts.add(name.as_ref().parse()?, n);
        }
        Ok(counts)
    }

    /// How many are in `state` (0 when none).
    pub fn get(&self, state: S) -> i64 {
        self.by_name.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)
    }

    /// Adds `n` to `state`'s count (a count is never below 1: `n` of 0 or less adds nothing).
    pub fn add(&mut self, state: S, n: i64) {
        if n <= 0 {
            return;
        }
        match self.by_name.binary_search_by(|(s, _)| s.name().cmp(state.name())) {
            Ok(at) => self.by_name[at].1 = self.by_name[at].1.saturating_add(n),
            Err(at) => self.by_name.insert(at, (state, n)),
        }
    }

    /// Adds every count of `other`.
    pub fn add_all(&mut self, other: &StateCounts<S>) {
        for (state, n) in other.iter() {
            self.add(state, n);
        }
    }

    /// Keeps only the states `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(S) -> bool) {
        self.by_name.retain(|(s, _)| keep(*s));
    }

    /// These counts without `state`'s.
    pub fn without(mut self, state: S) -> Self {
        self.retain(|s| s != state);
        self
    }

    /// Each state with some and its count, by name.
    pub fn iter(&self) -> impl Iterator<Item = (S, i64)> + '_ {
        self.by_name.iter().copied()
    }

    /// All of them together.
    pub fn total(&self) -> i64 {
        self.by_name.iter().map(|(_, n)| n).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl<S: CountedState> FromIterator<(S, i64)> for StateCounts<S> {
    fn from_iter<I: IntoIterator<Item = (S, i64)>>(iter: I) -> Self {
        let mut counts = StateCounts::default();
        for (state, n) in iter {
            counts.add(state, n);
        }
        counts
    }
}

/// A JSON object of name → count, in name order: the shape these counts always had.
impl<S: CountedState> Serialize for StateCounts<S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut map = serializer.serialize_map(Some(self.by_name.len()))?;
        for (state, n) in &self.by_name {
            map.serialize_entry(state.name(), n)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rows as the store gives them, and the counts they read as.
    type Case = (&'static [(&'static str, i64)], &'static [(RunState, i64)]);

    #[test]
    fn counts_read_by_name_add_up_and_keep_the_names_order() {
        let cases: &[Case] = &[
            (&[], &[]),
            (&[("running", 2), ("failed", 1)], &[(RunState::Failed, 1), (RunState::Running, 2)]),
            (&[("pending", 1), ("pending", 2)], &[(RunState::Pending, 3)]),
            (&[("stopped", 0)], &[]),
        ];
        for (rows, expected) in cases {
            let counts = StateCounts::<RunState>::from_names(rows.iter().copied()).unwrap();
            assert_eq!(counts.iter().collect::<Vec<_>>(), *expected, "{rows:?}");
            assert_eq!(counts.total(), expected.iter().map(|(_, n)| n).sum::<i64>());
        }
    }

    #[test]
    fn a_name_no_state_has_is_an_error_naming_it() {
        let err = StateCounts::<TestState>::from_names([("queued", 1), ("exploded", 2)]).unwrap_err();
        assert!(err.to_string().contains("'exploded'"), "{err}");
    }

    #[test]
    fn they_serialise_as_an_object_of_names_in_name_order() {
        let counts: StateCounts<RunState> =
            [(RunState::Running, 2), (RunState::Completed, 5), (RunState::Pending, 1)].into_iter().collect();
        let text = serde_json::to_string(&counts).unwrap();
        assert_eq!(text, r#"{"completed":5,"pending":1,"running":2}"#);
        assert_eq!(counts.get(RunState::Failed), 0);
        assert_eq!(counts.clone().without(RunState::Pending).total(), 7);
    }

    proptest! {
        /// Any text read as a state name is a count or an error, never a panic; what is kept
        /// is positive and in name order.
        #[test]
        fn any_rows_read_or_refuse(rows in prop::collection::vec(("[a-z]{0,9}", -3i64..5), 0..12)) {
            if let Ok(counts) = StateCounts::<RunState>::from_names(rows.iter().map(|(s, n)| (s.as_str(), *n))) {
                let names: Vec<&str> = counts.iter().map(|(s, _)| s.name()).collect();
                let mut sorted = names.clone();
                sorted.sort();
                prop_assert_eq!(names, sorted);
                prop_assert!(counts.iter().all(|(_, n)| n > 0));
            }
        }
    }
}
