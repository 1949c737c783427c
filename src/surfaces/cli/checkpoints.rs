//! `lachesis run checkpoints ID`: what a run's trainer saved, across its attempts.

use lachesis::model::Checkpoint;

use super::output::{table, time};

/// The status line of a run's last checkpoint: `step 6 (attempt 1) tinker://…`.
pub fn line(checkpoint: &Checkpoint) -> String {
    let where_ = checkpoint.path.as_deref().or(checkpoint.weights.as_deref()).unwrap_or("-");
    format!("step {} (attempt {}) {where_}", checkpoint.step, checkpoint.attempt)
}

pub fn print(checkpoints: &[Checkpoint]) {
    if checkpoints.is_empty() {
        println!("no checkpoints recorded: the workflow's `checkpoints:` says where its trainer writes them");
        return;
    }
    let mut t = table(["ATTEMPT", "STEP", "PATH", "WEIGHTS", "AT"]);
    for c in checkpoints {
        t.add_row([
            c.attempt.to_string(),
            c.step.to_string(),
            c.path.clone().unwrap_or_else(|| "-".into()),
            c.weights.clone().unwrap_or_else(|| "-".into()),
            time(Some(c.at)),
        ]);
    }
    println!("{t}");
}
