//! Inference-test figures: what an inference test adds to its evaluator's own run time, for a
//! verifiers environment (the real `vf-eval`) and an Atropos one (its `process` mode), side by
//! side, against the stand-in model server. Each round runs `lachesis test start --wait` (the
//! whole CLI process: queueing, the daemon's claim, the shim, reading the results); the
//! overhead is that minus the evaluator's own run inside it (its process's start to exit, as
//! the test recorded them). The same command run alone, outside lachesis, is timed too, for
//! reference: Python's start-up varies by seconds on a loaded machine, so it is not subtracted.
//! Needs the Python tiers: `LACHESIS_TEST_VERIFIERS_PYTHON` (tests/python/verifiers.sh) and
//! `LACHESIS_TEST_PYTHON` (tests/python/venv.sh); a kind whose venv is not given is left out,
//! saying so.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use lachesis::environments::{EnvKind, EnvSource, FieldInfo, FieldKind, Selection};
use lachesis::service::Service;
use lachesis::settings::Settings;

use super::supervisor::{BenchResult, Daemon, Percentiles};

const KEY: &str = "sk-bench-0b5e11c0ffee";
const MODEL: &str = "good-model";

#[derive(Debug, Default, Serialize)]
pub struct InferenceReport {
    pub rounds: usize,
    /// Examples (groups) and rollouts (completions) per example of each test.
    pub steps: u32,
    pub group_size: u32,
    pub kinds: Vec<KindFigures>,
    /// Kinds left out, and why.
    pub skipped: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct KindFigures {
    pub kind: String,
    /// `test start --wait` of one model, whole CLI process.
    pub test_ms: Percentiles,
    /// The evaluator's process inside the test, start to exit.
    pub evaluator_ms: Percentiles,
    /// Per round, the test minus its evaluator's run.
    pub overhead_ms: Percentiles,
    /// The test's command run alone, outside lachesis (for reference).
    pub alone_ms: Percentiles,
}

/// The stand-in model server; killed when dropped.
struct Stub(Child, u16);

impl Stub {
    fn start(python: &Path) -> BenchResult<Stub> {
        let script = repo().join("tests/python/stub_inference.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        let port = line.trim().strip_prefix("READY ").ok_or("the stub did not say READY")?.parse()?;
        Ok(Stub(child, port))
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One scratch home and its daemon, with the environment variables every command gets.
struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    env: Vec<(String, String)>,
    _daemon: Option<Daemon>,
}

impl Lab {
    fn new(python: &Path, extra: &[(&str, String)]) -> BenchResult<Lab> {
        let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
        let home = dir.path().to_path_buf();
        std::fs::create_dir_all(home.join("workflows"))?;
        let mut env: Vec<(String, String)> = [
            ("LACHESIS_HOME", home.display().to_string()),
            ("LACHESIS_PYTHON", python.display().to_string()),
            ("LACHESIS_PROVIDER_KEYS", "STUB_KEY".into()),
            ("STUB_KEY", KEY.into()),
            ("HF_HUB_OFFLINE", "1".into()),
            ("HF_DATASETS_OFFLINE", "1".into()),
            ("WANDB_MODE", "disabled".into()),
            ("LACHESIS_LOG", "warn".into()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Ok(Lab { _dir: dir, home, env, _daemon: None })
    }

    fn command(&self, exe: &Path) -> Command {
        let mut cmd = Command::new(exe);
        cmd.env_remove("LACHESIS_DATABASE_URL").env_remove("LACHESIS_WORKFLOWS");
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn start_daemon(&mut self, exe: &Path) -> BenchResult<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.home.join("daemon.log"))?;
        let child =
            self.command(exe).arg("daemon").stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn()?;
        self._daemon = Some(Daemon(child));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.home.join("daemon.sock").exists() {
            if Instant::now() > deadline {
                return Err("the daemon did not start".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    async fn service(&self) -> BenchResult<Service> {
        Ok(Service::open(Settings::new(Some(self.home.clone()), None)).await?)
    }
}

pub async fn run(exe: &Path, rounds: usize, say: &dyn Fn(&str)) -> BenchResult<InferenceReport> {
    let (steps, group_size) = (2u32, 4u32);
    let mut report = InferenceReport { rounds, steps, group_size, ..InferenceReport::default() };
    let venv = |var: &str| std::env::var_os(var).map(PathBuf::from);
    match venv("LACHESIS_TEST_VERIFIERS_PYTHON") {
        Some(python) => {
            let mut lab = Lab::new(&python, &[])?;
            select_vf_arith(&lab).await?;
            lab.start_daemon(exe)?;
            say("verifiers: vf-eval of tests/python/vf_envs/vf_arith");
            report
                .kinds
                .push(measure(exe, &lab, &python, "verifiers", &[], rounds, (steps, group_size), say).await?);
        }
        None => report.skipped.push("verifiers: LACHESIS_TEST_VERIFIERS_PYTHON not set".into()),
    }
    match venv("LACHESIS_TEST_PYTHON") {
        Some(python) => {
            let tokenizer =
                python.parent().and_then(Path::parent).ok_or("odd venv")?.join("lachesis-tokenizer");
            let envs = repo().join("tests/python/envs");
            let mut lab = Lab::new(&python, &[("LACHESIS_ENV_DIRS", envs.display().to_string())])?;
            std::fs::write(
                lab.home.join("workflows/arith-tests.yaml"),
                format!(
                    "name: arith-tests\nstages:\n  - {{name: unused, argv: [\"true\"]}}\nlocked:\n  env:\n    tokenizer_name: {}\n    max_token_length: 256\n    max_num_workers: 4\n    max_batches_offpolicy: 3\n",
                    tokenizer.display()
                ),
            )?;
            lab.start_daemon(exe)?;
            say("atropos: `process` of tests/python/envs/arith_env.py");
            let extra = ["--env", "arith", "--workflow", "arith-tests", "--server-type", "openai"];
            report.kinds.push(
                measure(exe, &lab, &python, "atropos", &extra, rounds, (steps, group_size), say).await?,
            );
        }
        None => report.skipped.push("atropos: LACHESIS_TEST_PYTHON not set".into()),
    }
    Ok(report)
}

/// The test environment as `env select` would store it, not installed.
async fn select_vf_arith(lab: &Lab) -> BenchResult<()> {
    let dir = repo().join("tests/python/vf_envs/vf_arith");
    let field = |name: &str, default: i64| FieldInfo {
        name: name.into(),
        type_name: "int".into(),
        kind: FieldKind::Int,
        optional: false,
        required: false,
        default: serde_json::json!(default),
        value: serde_json::json!(default),
        description: None,
    };
    let selection = Selection {
        env_name: "vf-arith".into(),
        env_file: dir.join("vf_arith.py"),
        kind: EnvKind::Verifiers,
        source: Some(EnvSource::Directory { dir }),
        class_name: "load_environment".into(),
        config_class: "load_environment".into(),
        fell_back: None,
        fields: vec![field("count", 4), field("unanswerable", 1)],
        config: [
            ("count".to_string(), serde_json::json!(4)),
            ("unanswerable".to_string(), serde_json::json!(1)),
        ]
        .into(),
        updated_at: lachesis::model::now_millis(),
    };
    lab.service().await?.put_selection_as_given(&selection).await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    exe: &Path,
    lab: &Lab,
    python: &Path,
    kind: &str,
    extra: &[&str],
    rounds: usize,
    (steps, group_size): (u32, u32),
    say: &dyn Fn(&str),
) -> BenchResult<KindFigures> {
    let stub = Stub::start(python)?;
    let url = format!("http://127.0.0.1:{}/v1", stub.1);
    let service = lab.service().await?;
    let (steps, group_size) = (steps.to_string(), group_size.to_string());
    let (mut test_ms, mut evaluator_ms, mut overhead_ms, mut alone_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let start = Instant::now();
        let out = lab
            .command(exe)
            .args(["test", "start", "--models", MODEL, "--steps", &steps, "--group-size", &group_size])
            .args(["--provider", &url, "--api-key-env", "STUB_KEY", "--timeout", "120s"])
            .args(extra)
            .args(["--wait", "--json"])
            .output()?;
        let tested = start.elapsed().as_secs_f64() * 1000.0;
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{kind} test: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
        if shown["test"]["state"] != "succeeded" {
            return Err(format!("{kind} test did not succeed: {shown:#}").into());
        }
        let id = uuid::Uuid::parse_str(shown["test"]["id"].as_str().ok_or("no test id")?)?;
        let test = service.test(id).await?.ok_or("the test vanished")?;
        let task = service.test_tasks(id).await?.into_iter().next().ok_or("the test has no task")?;
        let (Some(began), Some(ended)) = (task.record.started_at, task.record.ended_at) else {
            return Err(format!("{kind}: the task's start and end were not recorded: {task:?}").into());
        };
        let evaluator = (ended - began) as f64;

        // The same command, alone, in a directory of its own.
        let scratch = lab.home.join(format!("direct-{kind}-{round}"));
        std::fs::create_dir_all(&scratch)?;
        let plan = test.spec.task_plan(MODEL, &scratch);
        std::fs::create_dir_all(&plan.cwd)?;
        lachesis::inference::spec::write_secret_config(
            &lachesis::inference::spec::secret_config_path(&scratch, MODEL),
            KEY,
        )?;
        let log = std::fs::File::create(scratch.join("direct.log"))?;
        let start = Instant::now();
        let status = Command::new(&plan.argv[0])
            .args(&plan.argv[1..])
            .current_dir(&plan.cwd)
            .envs(lab.env.iter().map(|(k, v)| (k, v)))
            .envs(&plan.environ)
            .env(lachesis::inference::spec::PROVIDER_KEY_VAR, KEY)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()?;
        let alone = start.elapsed().as_secs_f64() * 1000.0;
        if !status.success() {
            return Err(
                format!("{kind}: the command alone failed ({status}); see {}", scratch.display()).into()
            );
        }
        say(&format!(
            "{kind} round {}: test {tested:.0} ms, its evaluator {evaluator:.0} ms, the command alone {alone:.0} ms",
            round + 1
        ));
        test_ms.push(tested);
        evaluator_ms.push(evaluator);
        overhead_ms.push(tested - evaluator);
        alone_ms.push(alone);
    }
    Ok(KindFigures {
        kind: kind.into(),
        test_ms: Percentiles::of(test_ms),
        evaluator_ms: Percentiles::of(evaluator_ms),
        overhead_ms: Percentiles::of(overhead_ms),
        alone_ms: Percentiles::of(alone_ms),
    })
}
