//! `--environments` (the figures bench): what `lachesis env list` costs with a Python holding
//! many distributions. A scratch home and a venv (`python3 -m venv --without-pip`) whose
//! site-packages holds N distributions written as pip writes them (200 by default; one in
//! twenty a verifiers environment, the others ordinary packages of a few modules), plus an
//! Atropos file and a `vf-init` layout in an environment directory. Timed: `env list --json`
//! as a user runs it (a new process each time, so it asks the Python where it imports from
//! each time), and the discovery alone in process.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::supervisor::{BenchResult, Percentiles};

/// Samples per figure.
const SAMPLES: usize = 10;

#[derive(Debug, Serialize)]
pub struct EnvironmentsReport {
    pub distributions: usize,
    pub environments_installed: usize,
    pub environments_listed: usize,
    /// `lachesis env list --json`, a process each time.
    pub env_list_ms: Percentiles,
    /// The discovery alone (the Python already asked), in process.
    pub discovery_ms: Percentiles,
    /// Asking the Python where it imports from (`sys.path`), once, uncached.
    pub python_ask_ms: f64,
}

const ENVIRONMENT: &str = "import verifiers as vf\n\n\ndef load_environment(num_examples: int = 8, split: str = \"train\", seed: int | None = None) -> vf.Environment:\n    raise RuntimeError(\"not imported by discovery\")\n";

fn library_module(i: usize) -> String {
    (0..40)
        .map(|f| {
            format!(
                "def helper_{f}(x, y={i}):\n    \"\"\"Helper {f}.\"\"\"\n    return [v * y for v in x]\n\n"
            )
        })
        .collect()
}

fn install(site: &Path, name: &str, requires: bool, files: &[(String, String)]) -> BenchResult<()> {
    let info = site.join(format!("{}-1.0.0.dist-info", name.replace('-', "_")));
    std::fs::create_dir_all(&info)?;
    let requires = if requires { "Requires-Dist: verifiers>=0.1.9\n" } else { "Requires-Dist: numpy\n" };
    std::fs::write(
        info.join("METADATA"),
        format!(
            "Metadata-Version: 2.4\nName: {name}\nVersion: 1.0.0\nSummary: {name}\n{requires}\n{}\n",
            "Long description. ".repeat(200)
        ),
    )?;
    let mut record = String::new();
    for (path, text) in files {
        let file = site.join(path);
        std::fs::create_dir_all(file.parent().ok_or("a parent")?)?;
        std::fs::write(&file, text)?;
        record.push_str(&format!("{path},sha256=AAAA,{}\n", text.len()));
    }
    std::fs::write(info.join("RECORD"), record)?;
    Ok(())
}

pub async fn run(exe: &Path, distributions: usize, say: &dyn Fn(&str)) -> BenchResult<EnvironmentsReport> {
    let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
    let home = dir.path().join("home");
    let venv = dir.path().join("venv");
    let out =
        std::process::Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).output()?;
    if !out.status.success() {
        return Err(format!("python3 -m venv: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let site: PathBuf = std::fs::read_dir(venv.join("lib"))?
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .ok_or("the venv has no site-packages")?;
    let every = 20;
    let mut installed = 0;
    for i in 0..distributions {
        if i % every == 0 {
            let name = format!("bench-env-{i:03}");
            let module = name.replace('-', "_");
            install(&site, &name, true, &[(format!("{module}.py"), ENVIRONMENT.to_string())])?;
            installed += 1;
        } else {
            let module = format!("lib_{i:03}");
            let files: Vec<(String, String)> = (0..5)
                .map(|m| {
                    let path = if m == 0 {
                        format!("{module}/__init__.py")
                    } else {
                        format!("{module}/part_{m}.py")
                    };
                    (path, library_module(i))
                })
                .collect();
            install(&site, &format!("lib-{i:03}"), false, &files)?;
        }
    }
    let envs = dir.path().join("envs");
    std::fs::create_dir_all(envs.join("vf_local"))?;
    std::fs::write(
        envs.join("vf_local/pyproject.toml"),
        "[project]\nname = \"vf-local\"\nversion = \"0.1.0\"\n",
    )?;
    std::fs::write(envs.join("vf_local/vf_local.py"), ENVIRONMENT)?;
    std::fs::write(envs.join("arith.py"), "class ArithEnv(BaseEnv):\n    name = \"arith\"\n")?;
    let python = venv.join("bin/python");
    say(&format!("{distributions} distributions ({installed} environments) in {}", site.display()));

    let mut listed = 0;
    let mut env_list = Vec::new();
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let out = std::process::Command::new(exe)
            .args(["env", "list", "--json"])
            .env("LACHESIS_HOME", &home)
            .env("LACHESIS_PYTHON", &python)
            .env("LACHESIS_ENV_DIRS", &envs)
            .env("LACHESIS_TINKER_ATROPOS", dir.path())
            .output()?;
        env_list.push(started.elapsed().as_secs_f64() * 1000.0);
        if !out.status.success() {
            return Err(format!("env list: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let list: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        listed = list.as_array().map_or(0, Vec::len);
    }
    let env_list = Percentiles::of(env_list);
    say(&format!(
        "env list --json: p50 {:.1} ms, max {:.1} ms ({listed} listed)",
        env_list.p50, env_list.max
    ));

    let started = Instant::now();
    let python_text = python.display().to_string();
    let site_answer = lachesis::environments::verifiers::python_site(&python_text).await?;
    let python_ask_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut discovery = Vec::new();
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let found = lachesis::environments::discover_all(std::slice::from_ref(&envs), Ok(&site_answer));
        discovery.push(started.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(found);
    }
    let discovery_ms = Percentiles::of(discovery);
    say(&format!(
        "discovery in process: p50 {:.1} ms; asking the Python {python_ask_ms:.1} ms",
        discovery_ms.p50
    ));
    Ok(EnvironmentsReport {
        distributions,
        environments_installed: installed,
        environments_listed: listed,
        env_list_ms: env_list,
        discovery_ms,
        python_ask_ms,
    })
}
