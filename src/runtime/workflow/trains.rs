//! The kind of environment a workflow trains. A workflow declares it (`environment: verifiers`),
//! or leaves it to be read from its stages: one that runs the environment's file (`{env_file}`,
//! e.g. `{python} {env_file} serve`) trains an Atropos environment, and any other trains
//! whatever kind it is given (or none). Submission refuses an environment of another kind.

use crate::environments::EnvKind;

use super::Workflow;

impl Workflow {
    /// The kind of environment this workflow trains, when it trains only one.
    #[must_use]
    pub fn trains(&self) -> Option<EnvKind> {
        match self.environment.as_deref() {
            Some(declared) => EnvKind::parse(declared),
            None => self.uses_var("env_file").then_some(EnvKind::Atropos),
        }
    }

    /// Why `environment:` names no kind, if it does not.
    pub(super) fn check_environment(&self) -> Result<(), String> {
        match self.environment.as_deref() {
            Some(declared) if EnvKind::parse(declared).is_none() => {
                let kinds: Vec<&str> = EnvKind::ALL.iter().map(|k| k.as_str()).collect();
                Err(format!(
                    "'{}' is not a kind of environment (kinds: {})",
                    crate::text::one_line(declared),
                    kinds.join(", ")
                ))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::environments::EnvKind;
    use crate::workflow::Workflow;

    fn parse(text: &str) -> Result<Workflow, String> {
        Workflow::parse(Path::new("w.yaml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_declared_kind_wins_and_a_stage_running_the_env_file_trains_atropos() {
        let declared =
            parse("name: v\nenvironment: verifiers\nstages:\n  - {name: t, argv: [x, \"{env_name}\"]}\n");
        assert_eq!(declared.unwrap().trains(), Some(EnvKind::Verifiers));
        let serve = parse("name: a\nstages:\n  - {name: env, argv: [\"{python}\", \"{env_file}\", serve]}\n");
        assert_eq!(serve.unwrap().trains(), Some(EnvKind::Atropos));
        let any = parse("name: n\nstages:\n  - {name: t, argv: [echo, \"{env_name}\"]}\n");
        assert_eq!(any.unwrap().trains(), None, "naming the environment does not say its kind");
    }

    #[test]
    fn an_unknown_kind_is_one_line_naming_the_field() {
        let err =
            parse("name: v\nenvironment: \"gym\\nnasium\"\nstages:\n  - {name: t, argv: [x]}\n").unwrap_err();
        assert_eq!(
            err,
            "w.yaml: environment: 'gym\\nnasium' is not a kind of environment (kinds: atropos, verifiers)"
        );
        let err =
            parse("name: v\nenvironment: [verifiers]\nstages:\n  - {name: t, argv: [x]}\n").unwrap_err();
        assert!(err.starts_with("w.yaml: environment: ") && !err.contains('\n'), "{err}");
    }
}
