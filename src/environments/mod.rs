//! Environments of every kind: finding them and describing their configuration.

mod classes;
mod discovery;
mod fields;
mod introspect;
mod kind;
mod scan;
mod selection;

pub use discovery::{DiscoveredEnv, Discovery, DiscoveryWarning, LookupError, discover};
pub use fields::{FieldInfo, FieldKind, ValueError, check_value};
pub use introspect::{IntrospectError, Introspection, MIN_PYTHON, PythonVersion, introspect};
pub use kind::{EnvKind, EnvSource};
pub use selection::{EditError, LockedProfile, Selection, run_config};
