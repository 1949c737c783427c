//! W&B sweep files with `program:` run as they are: each member as `wandb agent` would run it,
//! and one that cannot run as written refused with nothing queued.

use super::*;

/// A W&B sweep program: records its argv, its W&B environment and its config file, then logs
/// a reward that grows with its learning rate.
const PROGRAM: &str = r#"import json, os, sys
args = sys.argv[1:]
lr = float([a for a in args if a.startswith("--lr=")][0].split("=", 1)[1])
with open(os.environ["WANDB_SWEEP_PARAM_PATH"]) as f:
    config = f.read()
print("seen " + json.dumps({"argv": args, "cwd": os.getcwd(), "sweep": os.environ["WANDB_SWEEP_ID"],
      "run": os.environ["WANDB_RUN_ID"], "name": os.environ["WANDB_NAME"], "project": os.environ.get("WANDB_PROJECT"), "config": config}))
for step in range(3):
    print(f"step {step} reward={lr * (step + 1)}", flush=True)
"#;

#[tokio::test]
async fn a_w_and_b_program_sweep_runs_each_member_as_the_agent_would() {
    let mut home = TestHome::new();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("train.py"), PROGRAM).unwrap();
    let file = project.join("sweep.yaml");
    std::fs::write(
        &file,
        "program: train.py\nmethod: grid\nproject: rl\nmetric: {name: reward, goal: maximize}\n\
         metrics: {log: {stage: program, pattern: 'step (?P<step>\\d+) reward=(?P<reward>\\S+)'}}\n\
         parameters:\n  lr: {values: [0.1, 0.00001]}\n  tag: {value: 'a b'}\n",
    )
    .unwrap();
    home.start_daemon();
    let (sweep, members) = start(&home, &file.to_string_lossy());
    assert_eq!(members.len(), 2);
    let mut seen = Vec::new();
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
        assert_eq!(run.workflow, "wandb-program");
        let log = std::fs::read_to_string(run.run_dir.join("program.log")).unwrap();
        let line = log.lines().find_map(|l| l.strip_prefix("seen ")).unwrap_or_else(|| panic!("{log}"));
        seen.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
    }
    // `--name=value` as Python's str writes it, in the program's own directory, with W&B's ids.
    assert_eq!(seen[0]["argv"], serde_json::json!(["--lr=0.1", "--tag=a b"]));
    assert_eq!(seen[1]["argv"], serde_json::json!(["--lr=1e-05", "--tag=a b"]));
    assert_eq!(seen[0]["cwd"], std::fs::canonicalize(&project).unwrap().to_string_lossy().as_ref());
    assert_eq!(seen[0]["sweep"], &sweep.to_string()[..8]);
    assert_eq!(seen[0]["project"], "rl");
    assert_eq!(seen[0]["run"], format!("{}-program", &members[0].to_string()[..8]));
    // The display name the daemon finds the member's W&B run by.
    assert_eq!(seen[0]["name"], format!("run-{}", &members[0].to_string()[..8]));
    assert_eq!(
        seen[1]["config"],
        "wandb_version: 1\n\"lr\":\n  value: 1.0e-05\n\"tag\":\n  value: \"a b\"\n"
    );
    // Its metric, read from the program's log, ranks the members.
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string()[..8], "--json"])).unwrap();
    assert_eq!(board["counts"]["completed"], 2, "{board:#}");
    let report = home.cli_ok(&["run", "status", &members[0].to_string()]);
    assert!(report.contains("reward 0.300 (step 2)"), "{report}");
    home.kill_daemon();
}

#[tokio::test]
async fn a_program_sweep_that_cannot_run_as_written_is_refused_with_nothing_queued() {
    let mut home = TestHome::new();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(home.path().join("outside.py"), "print(1)\n").unwrap();
    std::os::unix::fs::symlink(home.path().join("outside.py"), project.join("link.py")).unwrap();
    let grid = "method: grid\nmetrics: {log: {stage: program, pattern: 'r=(?P<r>\\S+)'}}\nparameters: {lr: {values: [1]}}\n";
    for (program, says) in [
        ("program: missing.py\n", "program: "),
        ("program: link.py\n", "leads out of"),
        ("program: ../outside.py\n", "leaves the sweep's directory"),
        ("program: x.py\ncommand: ['${interpreter}', '${nope}']\n", "unknown macro '${nope}'"),
    ] {
        let file = project.join("sweep.yaml");
        std::fs::write(&file, format!("{program}{grid}")).unwrap();
        let out = home.cli(&["sweep", "start", &file.to_string_lossy()]);
        let err = stderr(&out);
        assert!(!out.status.success() && err.contains(says), "{program}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // Its metric from W&B: read in the sweep's project, which it must name.
    std::fs::write(project.join("t.py"), "print(1)\n").unwrap();
    let file = project.join("wandb.yaml");
    std::fs::write(&file, "program: t.py\nmethod: grid\nparameters: {lr: {values: [1]}}\n").unwrap();
    let err = stderr(&home.cli(&["sweep", "start", &file.to_string_lossy()]));
    assert!(err.contains("project: missing"), "{err}");
    assert!(home.cli_ok(&["sweep", "list", "--json"]).contains("[]"));
    // Without a file, the program's directory is said in the file.
    let service = home.service().await;
    let text = format!("program: x.py\n{grid}");
    let err = service.submit_sweep(&text, None, Default::default()).await.unwrap_err().to_string();
    assert!(err.contains("directory: missing"), "{err}");
}
