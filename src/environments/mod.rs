//! Atropos environments: finding them on disk and describing their configuration.

mod discovery;
mod introspect;
mod selection;

pub use discovery::{DiscoveredEnv, Discovery, DiscoveryWarning, LookupError, discover};
pub use introspect::{
    FieldInfo, FieldKind, IntrospectError, Introspection, MIN_PYTHON, PythonVersion, ValueError, check_value,
    introspect,
};
pub use selection::{EditError, LockedProfile, Selection, run_config};
