//! The part of lachesis that owns run state: the service (every operation a surface offers),
//! the reconciler (the daemon's one loop) and the store beneath them both.

pub mod reconciler;
pub mod service;
mod store;
