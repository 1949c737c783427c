//! `lachesis doctor`: what a training run needs, checked one line each. Key values are never
//! shown, only whether they are set.

use crate::launch::space::human_bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::service::Service;

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// False for things only some runs need (a warning, not a failure).
    pub required: bool,
    pub detail: String,
}

/// What `doctor` found: one check per thing a run needs.
#[derive(Clone, Debug, Serialize)]
pub struct Checkup {
    pub checks: Vec<Check>,
}

impl Checkup {
    /// Whether everything a run needs is there.
    pub fn healthy(&self) -> bool {
        self.checks.iter().all(|c| c.ok || !c.required)
    }

    pub fn to_json(&self) -> Value {
        json!({ "healthy": self.healthy(), "checks": self.checks })
    }
}

/// Whether the daemon's writes land, as it says on its home socket (`GET /health`): a
/// failure while the store refuses them, since when and why. None when it does not answer.
async fn writes_check(settings: &crate::settings::Settings) -> Option<Check> {
    let health = crate::api::client::health(settings).await?;
    Some(match health.writes_failing {
        None => check("writes", true, true, "the daemon's writes to the store land"),
        Some(failing) => check("writes", false, true, failing.describe(crate::model::now_millis())),
    })
}

/// Where the HTTP API's bearer token is (never its value), and whether only the owner can read it.
fn api_token_check(settings: &crate::settings::Settings) -> Check {
    use std::os::unix::fs::PermissionsExt;
    if crate::environ::is_set("LACHESIS_API_TOKEN") {
        return check(
            "api token",
            true,
            false,
            "LACHESIS_API_TOKEN is set: `daemon --listen HOST:PORT` requires it",
        );
    }
    let path = crate::api::token_path(&settings.home);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.permissions().mode() & 0o077 != 0 => check(
            "api token",
            false,
            false,
            format!(
                "{} is readable by others (mode {:o}): chmod 600 it",
                path.display(),
                meta.permissions().mode() & 0o777
            ),
        ),
        Ok(_) => check(
            "api token",
            true,
            false,
            format!("{} (send it as `Authorization: Bearer …`)", path.display()),
        ),
        Err(_) => check(
            "api token",
            true,
            false,
            format!("{} is created when `daemon --listen HOST:PORT` first starts", path.display()),
        ),
    }
}

/// Free space on the home's filesystem against the reserve the store and status files need.
fn disk_check(home: &std::path::Path) -> Check {
    use crate::launch::space::space_at;
    match space_at(home) {
        Ok(space) if space.is_low() => check(
            "disk",
            false,
            false,
            format!(
                "only {} free under {}, below the {} reserve: stage logs drop output until space is freed",
                human_bytes(space.available),
                home.display(),
                human_bytes(space.reserve())
            ),
        ),
        Ok(space) => check(
            "disk",
            true,
            false,
            format!(
                "{} free under {} (reserve {})",
                human_bytes(space.available),
                home.display(),
                human_bytes(space.reserve())
            ),
        ),
        Err(err) => {
            check("disk", false, false, format!("cannot read free space under {}: {err}", home.display()))
        }
    }
}

/// The counted pools the home's daemon published when it last started (`--pool`).
fn pools_check(home: &std::path::Path) -> Check {
    match crate::node_pools::published(home) {
        Ok(pools) if pools.is_empty() => {
            check("pools", true, false, "none: runs with `needs` are refused (see `daemon --pool`)")
        }
        Ok(pools) => check("pools", true, false, format!("{pools} (as the daemon last started)")),
        Err(err) => check("pools", false, false, err.to_string()),
    }
}

fn check(name: &str, ok: bool, required: bool, detail: impl Into<String>) -> Check {
    Check { name: name.into(), ok, required, detail: detail.into() }
}

pub async fn checkup(service: &Service) -> Checkup {
    let settings = &service.settings;
    let mut checks = Vec::new();
    checks.push(check("store", true, true, format!("{} store reachable", service.backend())));
    let daemon = crate::wake::poke(&settings.socket_path(), crate::wake::Poke::Probe);
    checks.push(check(
        "daemon",
        daemon,
        true,
        if daemon {
            "a daemon is listening".to_string()
        } else {
            "no daemon is running: start `lachesis daemon`".to_string()
        },
    ));

    if daemon && let Some(check) = writes_check(settings).await {
        checks.push(check);
    }
    checks.push(api_token_check(settings));
    checks.push(disk_check(&settings.home));
    checks.push(pools_check(&settings.home));

    if service.backend().supports_nodes()
        && let Ok(nodes) = service.nodes().await
    {
        let up = nodes.iter().filter(|n| n.health == "up").count();
        let detail = format!("{up} of {} registered nodes up (see `lachesis node list`)", nodes.len());
        checks.push(check("nodes", up > 0, false, detail));
    }
    if let Some(check) = slurm_check(service).await {
        checks.push(check);
    }

    let python = &settings.python;
    let probe = tokio::process::Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2]); import atroposlib; print('atroposlib', getattr(atroposlib, '__version__', 'installed'))"])
        .output()
        .await;
    match probe {
        Err(_) => checks.push(check(
            "python",
            false,
            true,
            format!("'{python}' not found: install Python 3.11+ or set LACHESIS_PYTHON"),
        )),
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let mut lines = stdout.lines();
            let version = lines.next().unwrap_or("").trim().to_string();
            let new_enough = version
                .split_once('.')
                .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
                .is_some_and(|v| v >= (3, 11));
            checks.push(check(
                "python",
                new_enough,
                true,
                format!(
                    "{python} is Python {version}{}",
                    if new_enough { "" } else { "; 3.11 or newer is needed" }
                ),
            ));
            let atropos = lines.next().map(str::to_string);
            checks.push(check(
                "atroposlib",
                atropos.is_some(),
                true,
                atropos
                    .unwrap_or_else(|| format!("not importable: run `{python} -m pip install atroposlib`")),
            ));
        }
    }

    let checkout = settings.tinker_atropos.join("launch_training.py");
    checks.push(check(
        "tinker-atropos",
        checkout.is_file(),
        false,
        if checkout.is_file() {
            format!("{} found", settings.tinker_atropos.display())
        } else {
            format!("{} has no launch_training.py (set LACHESIS_TINKER_ATROPOS); needed by the tinker-atropos workflow", settings.tinker_atropos.display())
        },
    ));
    checks.extend(cookbook_checks(service, python).await);
    if let Some(check) = workflows_check(service) {
        checks.push(check);
    }
    let environments = service.environments().await.environments.len();
    checks.push(check("environments", environments > 0, false, format!("{environments} environments found")));
    for key in ["TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"] {
        // Where it came from, never its value.
        let detail = match crate::environ::source(key) {
            None => "not set".to_string(),
            Some(crate::environ::KeySource::Environment) => "set (from the environment)".to_string(),
            Some(crate::environ::KeySource::File(path)) => format!("set (from {})", path.display()),
        };
        checks.push(check(key, detail != "not set", false, detail));
    }
    for port in [8000u16, 8001] {
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        checks.push(check(
            &format!("port {port}"),
            free,
            false,
            if free { "free" } else { "in use (a tinker-atropos run holds it, or something else)" },
        ));
    }
    let limit = home_warn_size();
    let used = service.home_size();
    checks.push(check(
        "home size",
        used <= limit,
        false,
        if used <= limit {
            format!("{} uses {}", settings.home.display(), human_bytes(used))
        } else {
            format!(
                "{} uses {}, over {} (LACHESIS_HOME_WARN_SIZE): forget old runs with `lachesis gc --older-than 30d` or `daemon --keep-finished 30d`",
                settings.home.display(),
                human_bytes(used),
                human_bytes(limit)
            )
        },
    ));
    Checkup { checks }
}

/// The package of the tinker-cookbook recipe a stage runs (`-m tinker_cookbook.recipes.NAME.train`
/// runs `tinker_cookbook.recipes.NAME`).
fn recipe_of(argv: &[String]) -> Option<String> {
    let module = argv.windows(2).find(|pair| pair[0] == "-m").map(|pair| pair[1].as_str())?;
    let rest = module.strip_prefix("tinker_cookbook.recipes.")?;
    let name = rest.split('.').next().filter(|name| !name.is_empty())?;
    Some(format!("tinker_cookbook.recipes.{name}"))
}

/// What a recipe imports beyond tinker-cookbook's own dependencies: (recipe, module, what installs it).
const RECIPE_EXTRAS: &[(&str, &str, &str)] =
    &[("tinker_cookbook.recipes.verifiers_rl", "verifiers", "'tinker-cookbook[verifiers]'")];

/// Whether each tinker-cookbook recipe the catalog's workflows run is importable: a warning per
/// recipe, never a failure (only those workflows need it). Found without importing the recipe,
/// which would import torch.
async fn cookbook_checks(service: &Service, python: &str) -> Vec<Check> {
    let Ok(catalog) = service.settings.catalog() else { return Vec::new() };
    let mut users: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for name in catalog.names() {
        let Ok(workflow) = catalog.load(&name) else { continue };
        for recipe in workflow.stages.iter().filter_map(|stage| recipe_of(&stage.argv)) {
            users.entry(recipe).or_default().push(name.clone());
        }
    }
    if users.is_empty() {
        return Vec::new();
    }
    let extras = RECIPE_EXTRAS.iter().filter(|(recipe, ..)| users.contains_key(*recipe));
    let modules: Vec<&str> =
        users.keys().map(String::as_str).chain(extras.map(|(_, module, _)| *module)).collect();
    let found = importable(python, &modules).await;
    let mut checks = Vec::new();
    for (recipe, workflows) in &users {
        let needed = format!("needed by {}", workflows.join(", "));
        let missing_extra =
            RECIPE_EXTRAS.iter().find(|(of, module, _)| of == recipe && !found.iter().any(|f| f == module));
        let (ok, detail) = match (found.contains(recipe), missing_extra) {
            (false, _) => (
                false,
                format!(
                    "{recipe} is not importable: run `{python} -m pip install tinker-cookbook`; {needed}"
                ),
            ),
            (true, Some((_, module, package))) => (
                false,
                format!(
                    "{recipe} found, but {module} is not importable: run `{python} -m pip install {package}`; {needed}"
                ),
            ),
            (true, None) => (true, format!("{recipe} found ({needed})")),
        };
        let short = recipe.rsplit('.').next().unwrap_or(recipe);
        checks.push(check(&format!("tinker-cookbook {short}"), ok, false, detail));
    }
    checks
}

/// Which of `modules` the Python of `python` finds (none when it cannot run).
async fn importable(python: &str, modules: &[&str]) -> Vec<String> {
    // A raw string: a `\` line continuation would strip the indentation Python needs.
    const FIND: &str = r"import importlib.util, sys
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except Exception:
        found = False
    if found:
        print(name)
";
    let probe = tokio::process::Command::new(python)
        .arg("-c")
        .arg(FIND)
        .args(modules)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match probe {
        Ok(out) => String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect(),
        Err(_) => Vec::new(),
    }
}

/// The catalog's workflows: each broken file is named, and only affects itself.
fn workflows_check(service: &Service) -> Option<Check> {
    let catalog = match service.settings.catalog() {
        Ok(catalog) => catalog,
        Err(err) => return Some(check("workflows", false, false, err.to_string())),
    };
    let names = catalog.names();
    let broken: Vec<String> =
        names.iter().filter_map(|name| catalog.load(name).err().map(|err| err.to_string())).collect();
    let detail = if broken.is_empty() {
        format!("{} workflows in {}", names.len(), catalog.dir().display())
    } else {
        format!("{} of {} workflows unusable: {}", broken.len(), names.len(), broken.join("; "))
    };
    Some(check("workflows", broken.is_empty(), false, detail))
}

/// The home size `doctor` warns above: `LACHESIS_HOME_WARN_SIZE` in bytes or with a K/M/G/T
/// suffix (powers of 1024), 10 GiB otherwise.
fn home_warn_size() -> u64 {
    const DEFAULT: u64 = 10 << 30;
    let Ok(text) = std::env::var("LACHESIS_HOME_WARN_SIZE") else {
        return DEFAULT;
    };
    let text = text.trim().trim_end_matches(['B', 'b']).trim_end_matches(['i']);
    let (number, shift) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&text[..text.len() - 1], 10),
        Some('M') => (&text[..text.len() - 1], 20),
        Some('G') => (&text[..text.len() - 1], 30),
        Some('T') => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    number.trim().parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift)).unwrap_or(DEFAULT)
}

/// Whether Slurm answers, when some workflow launches its stages there.
async fn slurm_check(service: &Service) -> Option<Check> {
    let catalog = service.settings.catalog().ok()?;
    let users: Vec<String> = catalog
        .names()
        .into_iter()
        .filter(|name| catalog.load(name).is_ok_and(|w| w.launcher == crate::workflow::Launcher::Slurm))
        .collect();
    if users.is_empty() {
        return None;
    }
    let out = tokio::process::Command::new("sinfo").args(["--noheader", "--format=%P %a %D"]).output().await;
    let needed = format!("needed by {}", users.join(", "));
    Some(match out {
        Err(_) => {
            check("slurm", false, false, format!("sinfo not found: install Slurm's client tools; {needed}"))
        }
        Ok(out) if !out.status.success() => {
            let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
            check("slurm", false, false, format!("sinfo failed ({err}); check SLURM_CONF; {needed}"))
        }
        Ok(out) => {
            let partitions = String::from_utf8_lossy(&out.stdout).lines().count();
            check("slurm", partitions > 0, false, format!("{partitions} partitions answer; {needed}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::recipe_of;

    #[test]
    fn a_stage_running_a_recipe_names_its_package() {
        let argv = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let verifiers = argv(&["{python}", "-m", "tinker_cookbook.recipes.verifiers_rl.train", "x=1"]);
        assert_eq!(recipe_of(&verifiers).as_deref(), Some("tinker_cookbook.recipes.verifiers_rl"));
        assert_eq!(recipe_of(&argv(&["python", "-m", "tinker_cookbook.recipes."])), None);
        assert_eq!(recipe_of(&argv(&["python", "-m", "atroposlib.cli"])), None);
        assert_eq!(
            recipe_of(&argv(&["python", "tinker_cookbook.recipes.math_rl.train"])),
            None,
            "not run as -m"
        );
    }
}
