//! The batch script `sbatch` runs for a stage: into its directory, then the stage itself, or
//! the stage under `lachesis redact` when its output is masked.

use std::collections::BTreeMap;
use std::path::Path;

use crate::workflow::StagePlan;

/// A batch script and the environment it needs on top of the stage's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchScript {
    pub text: String,
    pub environ: BTreeMap<String, String>,
}

/// The batch script for `plan`: `#!/bin/bash`, into the working directory, then the stage.
///
/// Without `mask_exe` the script `exec`s the stage, so the stage is the job's main process
/// and gets scancel's SIGTERM itself. With `mask_exe` (the lachesis binary, reachable at that
/// path on the compute node) output goes through `lachesis redact`, and the shell stays as the
/// stage's parent: the masking filter must outlive the stage to copy its last lines, and
/// Slurm kills everything left once the main process exits. The shell forwards TERM, INT,
/// HUP, USR1 and USR2 to the stage, waits for the filter to drain (5 s at most) and exits as
/// the stage did, re-raising its signal, so Slurm records `ExitCode=0:15` for a stage killed
/// by SIGTERM. (A stage exiting with a code above 128 is taken to have died of signal
/// code-128; bash cannot tell the two apart.)
///
/// Arguments holding a secret (a secret variable's value, or a value of a `--…key`/`--…token`
/// flag) are read from `LACHESIS_SECRET_ARG_<i>` variables, returned in `env`.
pub fn batch_script(plan: &StagePlan, mask_exe: Option<&Path>) -> BatchScript {
    let secrets = argv_secrets(plan);
    let mut env = BTreeMap::new();
    let mut words = Vec::with_capacity(plan.argv.len());
    for (i, arg) in plan.argv.iter().enumerate() {
        let var = format!("{}{i}", crate::secrets::SECRET_ARG_PREFIX);
        let is_secret = |text: &str| secrets.iter().any(|s| text == s);
        let holds_secret = |text: &str| secrets.iter().any(|s| s.len() >= 8 && text.contains(s.as_str()));
        match arg.split_once('=') {
            Some((flag, value)) if is_secret(value) && !holds_secret(flag) => {
                env.insert(var.clone(), value.to_string());
                words.push(format!("{}\"${var}\"", quote(&format!("{flag}="))));
            }
            _ if is_secret(arg) || holds_secret(arg) => {
                env.insert(var.clone(), arg.clone());
                words.push(format!("\"${var}\""));
            }
            _ => words.push(quote(arg)),
        }
    }
    let command = words.join(" ");
    let name: String = plan
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .collect();
    let cwd = quote(&plan.cwd.to_string_lossy());
    let text = match mask_exe {
        None => format!(
            "#!/bin/bash\n\
             # lachesis stage {name}: a Slurm batch job. The stage replaces this shell, so scancel's\n\
             # SIGTERM reaches it.\n\
             cd -- {cwd} || exit 126\n\
             exec -- {command}\n"
        ),
        Some(exe) => format!(
            "#!/bin/bash\n\
             # lachesis stage {name}: a Slurm batch job, output masked by `lachesis redact`. This shell\n\
             # stays as the stage's parent to let the filter drain; it forwards signals.\n\
             cd -- {cwd} || exit 126\n\
             lachesis_mask_exe={exe}\n\
             if [ ! -x \"$lachesis_mask_exe\" ]; then\n  \
               echo \"lachesis: $lachesis_mask_exe is not executable on $(hostname); stage not started\" >&2\n  \
               exit 127\n\
             fi\n\
             exec > >(trap '' TERM INT HUP USR1 USR2; exec \"$lachesis_mask_exe\" redact) 2>&1\n\
             lachesis_mask=$!\n\
             lachesis_forward() {{\n  \
               lachesis_signal=$1\n  \
               [ -z \"${{lachesis_stage:-}}\" ] || kill -s \"$1\" \"$lachesis_stage\" 2>/dev/null\n\
             }}\n\
             for lachesis_s in TERM INT HUP USR1 USR2; do trap \"lachesis_forward $lachesis_s\" \"$lachesis_s\"; done\n\
             {command} &\n\
             lachesis_stage=$!\n\
             [ -z \"${{lachesis_signal:-}}\" ] || kill -s \"$lachesis_signal\" \"$lachesis_stage\" 2>/dev/null\n\
             while kill -0 \"$lachesis_stage\" 2>/dev/null; do wait \"$lachesis_stage\"; done\n\
             wait \"$lachesis_stage\"\n\
             lachesis_status=$?\n\
             trap - TERM INT HUP USR1 USR2\n\
             exec >/dev/null 2>&1\n\
             {{ sleep 5; kill -KILL \"$lachesis_mask\"; }} &\n\
             lachesis_watchdog=$!\n\
             wait \"$lachesis_mask\"\n\
             kill \"$lachesis_watchdog\"\n\
             if ((lachesis_status > 128 && lachesis_status < 160)); then\n  \
               ulimit -c 0\n  \
               kill -$((lachesis_status - 128)) $$\n\
             fi\n\
             exit \"$lachesis_status\"\n",
            exe = quote(&exe.to_string_lossy()),
        ),
    };
    BatchScript { text, environ: env }
}

/// Secret strings that may appear in argv: values of secret flags, and of the secret variables
/// the stage will see (its own env first, else the daemon's, which `--export=ALL` passes on).
pub(super) fn argv_secrets(plan: &StagePlan) -> Vec<String> {
    let mut secrets = crate::secrets::secret_flag_values(&plan.argv);
    for var in crate::secrets::SECRET_VARS {
        secrets.extend(plan.environ.get(*var).cloned().or_else(|| crate::environ::var(var)));
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// Single-quotes `text` for bash: everything inside is literal, `'` becomes `'\''`.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A stage plan running `argv` in a directory whose name has a space.
    pub(in crate::runtime::launch::slurm) fn plan(argv: &[&str]) -> StagePlan {
        StagePlan {
            name: "trainer".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: PathBuf::from("/runs/r 1"),
            environ: BTreeMap::new(),
            log_path: PathBuf::from("/runs/r 1/trainer.log"),
            start_delay: None,
            probe: None,
            start_timeout: Duration::from_secs(60),
            log_limits: Default::default(),
        }
    }

    /// Runs `script` with bash (not through Slurm) and returns what it printed.
    fn run_bash(script: &BatchScript, cwd: &Path) -> std::process::Output {
        let text = script.text.replace(&quote("/runs/r 1"), &quote(&cwd.to_string_lossy()));
        std::process::Command::new("bash").arg("-c").arg(text).envs(&script.environ).output().unwrap()
    }

    #[test]
    fn the_script_execs_the_stage_with_every_argument_intact() {
        let awkward =
            ["printf", "<%s>\\n", "two words", "it's", "\"dq\"", "$HOME", "`id`", "a\nb", "", "-n", "*"];
        let script = batch_script(&plan(&awkward), None);
        assert!(script.text.starts_with("#!/bin/bash\n"));
        assert!(
            script.text.contains("\ncd -- '/runs/r 1' || exit 126\nexec -- 'printf' "),
            "{}",
            script.text
        );
        assert!(script.environ.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let out = run_bash(&script, dir.path());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "<two words>\n<it's>\n<\"dq\">\n<$HOME>\n<`id`>\n<a\nb>\n<>\n<-n>\n<*>\n"
        );
    }

    #[test]
    fn secrets_in_argv_travel_in_the_environment_not_in_the_script() {
        let mut p = plan(&[
            "train",
            "--api_key",
            "sk-flag-secret",
            "--token=tok-0123456789",
            "--url=http://x?k=tnkr-envsecret",
            "plain",
        ]);
        p.environ.insert("TINKER_API_KEY".into(), "tnkr-envsecret".into());
        let script = batch_script(&p, None);
        for secret in ["sk-flag-secret", "tok-0123456789", "tnkr-envsecret"] {
            assert!(!script.text.contains(secret), "{secret} in:\n{}", script.text);
        }
        assert!(script.text.contains(
            "exec -- 'train' '--api_key' \"$LACHESIS_SECRET_ARG_2\" '--token='\"$LACHESIS_SECRET_ARG_3\" \"$LACHESIS_SECRET_ARG_4\" 'plain'\n"
        ), "{}", script.text);
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_2"], "sk-flag-secret");
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_3"], "tok-0123456789");
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_4"], "--url=http://x?k=tnkr-envsecret");
        // The stage still gets the real values.
        let mut echo = p.clone();
        echo.argv[0] = "echo".into();
        let script = batch_script(&echo, None);
        let dir = tempfile::tempdir().unwrap();
        let out = run_bash(&script, dir.path());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "--api_key sk-flag-secret --token=tok-0123456789 --url=http://x?k=tnkr-envsecret plain\n"
        );
    }

    /// A stand-in for `lachesis redact` (which lives in the CLI): sed replacing one secret.
    fn fake_mask_exe(dir: &Path, secret: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("fake-lachesis");
        std::fs::write(
            &exe,
            format!("#!/bin/sh\n[ \"$1\" = redact ] || exit 9\nexec sed -u 's/{secret}/***/g'\n"),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    #[test]
    fn the_masked_script_filters_output_and_exits_as_the_stage_did() {
        let dir = tempfile::tempdir().unwrap();
        let exe = fake_mask_exe(dir.path(), "sekrit-value-1");
        let mut p = plan(&["sh", "-c", "echo out $0; echo err sekrit-value-1 >&2; exit 7", "sekrit-value-1"]);
        p.environ.insert("WANDB_API_KEY".into(), "sekrit-value-1".into());
        let script = batch_script(&p, Some(&exe));
        assert!(!script.text.contains("sekrit-value-1"));
        assert!(script.text.contains(&format!("lachesis_mask_exe='{}'\n", exe.display())));
        assert!(
            script.text.contains(
                "exec > >(trap '' TERM INT HUP USR1 USR2; exec \"$lachesis_mask_exe\" redact) 2>&1\n"
            )
        );
        assert!(
            script.text.contains("\n'sh' '-c' \"$LACHESIS_SECRET_ARG_2\" \"$LACHESIS_SECRET_ARG_3\" &\n"),
            "{}",
            script.text
        );
        let out = run_bash(&script, dir.path());
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out ***\nerr ***\n");

        // Killed by a signal: the shell dies of the same one.
        let killed = batch_script(&plan(&["sh", "-c", "kill -TERM $$"]), Some(&exe));
        let out = run_bash(&killed, dir.path());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(15));

        // A mask filter that cannot run: the stage does not start unmasked.
        let missing = batch_script(&plan(&["echo", "unmasked"]), Some(&dir.path().join("nope")));
        let out = run_bash(&missing, dir.path());
        assert_eq!(out.status.code(), Some(127));
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not executable"));
    }
}
