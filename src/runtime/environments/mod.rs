//! Environments of every kind: finding them and describing their configuration.

mod classes;
mod discovery;
mod fields;
#[cfg(test)]
mod fixtures;
mod introspect;
mod lookup;
mod scan;
mod selection;
pub mod verifiers;

pub use crate::model::{EnvKind, EnvSource};
pub use discovery::{DiscoveredEnv, Discovery, DiscoveryWarning, discover, discover_all};
pub use fields::{FieldInfo, FieldKind, ValueError, check_value};
pub use introspect::{IntrospectError, Introspection, MIN_PYTHON, PythonVersion, introspect};
pub use lookup::{LookupError, check_name};
pub use selection::{EditError, LockedProfile, Selection, run_config};
