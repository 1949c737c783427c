//! A stage's W&B identity: one W&B run per (run, stage), which every attempt of the run
//! continues. W&B continues a run across processes when each gets the same `WANDB_RUN_ID` and
//! `WANDB_RESUME=allow`; two processes writing one W&B run at once conflict, hence per stage.

use std::collections::BTreeMap;

/// The variable W&B takes a run's id from.
pub const RUN_ID_VAR: &str = "WANDB_RUN_ID";
/// The variable that lets a process continue an existing W&B run.
pub const RESUME_VAR: &str = "WANDB_RESUME";
/// The longest id made here (W&B allows more; a short id reads better in URLs).
const MAX_ID_LEN: usize = 64;

/// `{the run id's first 8 hex digits}-{stage}`, e.g. `3f2a9c1e-trainer`: letters, digits, `-`
/// and `_` only (any other character of the stage name becomes `_`), at most 64 characters.
pub fn wandb_run_id(run_id: &str, stage: &str) -> String {
    let prefix: String = run_id.chars().filter(char::is_ascii_hexdigit).take(8).collect();
    let stage = stage.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' });
    let mut id = format!("{prefix}-");
    id.extend(stage);
    id.truncate(MAX_ID_LEN);
    id
}

/// Gives a stage's environment its W&B identity, leaving alone what the workflow set itself.
pub fn add_identity(env: &mut BTreeMap<String, String>, run_id: &str, stage: &str) {
    env.entry(RUN_ID_VAR.to_string()).or_insert_with(|| wandb_run_id(run_id, stage));
    env.entry(RESUME_VAR.to_string()).or_insert_with(|| "allow".to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "3f2a9c1e-7b4d-4e0f-9a1b-2c3d4e5f6a7b";

    #[test]
    fn ids_are_stable_per_run_and_stage_and_plain() {
        assert_eq!(wandb_run_id(RUN, "trainer"), "3f2a9c1e-trainer");
        assert_eq!(wandb_run_id(RUN, "trainer"), wandb_run_id(RUN, "trainer"));
        assert_ne!(wandb_run_id(RUN, "trainer"), wandb_run_id(RUN, "env"));
        assert_ne!(wandb_run_id(RUN, "trainer"), wandb_run_id("9" /* another run */, "trainer"));
        assert_eq!(wandb_run_id(RUN, "sft.v2 é"), "3f2a9c1e-sft_v2__");
        let long = wandb_run_id(RUN, &"x".repeat(200));
        assert_eq!(long.len(), MAX_ID_LEN);
        assert!(long.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }

    #[test]
    fn the_workflow_s_own_values_win() {
        let mut env = BTreeMap::new();
        add_identity(&mut env, RUN, "trainer");
        assert_eq!(env[RUN_ID_VAR], "3f2a9c1e-trainer");
        assert_eq!(env[RESUME_VAR], "allow");
        let mut own = BTreeMap::from([
            (RUN_ID_VAR.to_string(), "mine".to_string()),
            (RESUME_VAR.to_string(), "must".to_string()),
        ]);
        add_identity(&mut own, RUN, "trainer");
        assert_eq!((own[RUN_ID_VAR].as_str(), own[RESUME_VAR].as_str()), ("mine", "must"));
    }
}
