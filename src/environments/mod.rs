//! Environments of every kind: finding them and describing their configuration.

mod classes;
mod discovery;
mod fields;
mod introspect;
mod scan;
mod selection;
pub mod verifiers;

pub use crate::model::{EnvKind, EnvSource};
pub use discovery::{
    DiscoveredEnv, Discovery, DiscoveryWarning, LookupError, check_name, discover, discover_all,
};
pub use fields::{FieldInfo, FieldKind, ValueError, check_value};
pub use introspect::{IntrospectError, Introspection, MIN_PYTHON, PythonVersion, introspect};
pub use selection::{EditError, LockedProfile, Selection, run_config};
