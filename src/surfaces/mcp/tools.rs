//! The tool table: each tool's name, description and arguments, handed to its handler.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::RlTools;
use super::args::{
    EditArgs, NameArgs, RunArgs, StartArgs, StartSweepArgs, SweepIdArgs, SweepStatusArgs, TestArgs,
};

#[tool_router(server_handler)]
impl RlTools {
    #[tool(
        description = "List the RL environments lachesis can train, Atropos and verifiers (name, kind, class, file path, description, source). Read an environment's file_path to learn how it loads data, builds prompts and scores answers before choosing one."
    )]
    async fn rl_list_environments(&self) -> String {
        self.list_environments().await
    }

    #[tool(
        description = "Select the environment to train; loads its configurable fields with their defaults (a verifiers environment's: the parameters of its load_environment). Next: rl_get_current_config() to see them, rl_edit_config() to change them, rl_test_inference() to check the environment works."
    )]
    async fn rl_select_environment(&self, Parameters(args): Parameters<NameArgs>) -> String {
        self.select_environment(args).await
    }

    #[tool(
        description = "The selected environment's configuration: fields you may change (with current values) and locked infrastructure fields (tokenizer, URLs, limits, LoRA rank, learning rate) that you may not."
    )]
    async fn rl_get_current_config(&self) -> String {
        self.get_current_config().await
    }

    #[tool(
        description = "Change one configurable field of the selected environment (see rl_get_current_config() for the fields; each environment has its own). Locked infrastructure fields are refused."
    )]
    async fn rl_edit_config(&self, Parameters(args): Parameters<EditArgs>) -> String {
        self.edit_config(args).await
    }

    #[tool(
        description = "Start training the selected environment with its current config; answers at once with the run id. Training takes hours: test the environment with rl_test_inference() first, then follow the run with rl_check_status(run_id) no more often than every 30 minutes."
    )]
    async fn rl_start_training(&self, Parameters(args): Parameters<StartArgs>) -> String {
        self.start_training(args).await
    }

    #[tool(
        description = "A training run's status: state, each process, running time, W&B metrics (step, reward_mean, percent_correct) and recent events. Check at most every 30 minutes per run: inside that window you get the last answer again and when a fresh one is due."
    )]
    async fn rl_check_status(&self, Parameters(args): Parameters<RunArgs>) -> String {
        self.check_status(args).await
    }

    #[tool(
        description = "Stop a training run (a queued one is cancelled): use it when metrics look bad, training has stalled, or you want other settings. Its processes get SIGTERM, then SIGKILL after a grace period."
    )]
    async fn rl_stop_training(&self, Parameters(args): Parameters<RunArgs>) -> String {
        self.stop_training(args).await
    }

    #[tool(
        description = "Final results of a training run: W&B summary (final_metrics), sampled history, trained weights, and each process's exit and duration. Also takes an inference-test id from rl_test_inference(wait=false)."
    )]
    async fn rl_get_results(&self, Parameters(args): Parameters<RunArgs>) -> String {
        self.get_results(args).await
    }

    #[tool(
        description = "List all training runs (queued, running and ended) with their status, newest first."
    )]
    async fn rl_list_runs(&self) -> String {
        self.list_runs().await
    }

    #[tool(
        description = "Test the selected environment before training: a few steps of inference and scoring per model through an OpenAI-compatible provider (OpenRouter by default; 3 steps x 16 completions per model, 3 models). Shows whether the environment loads, builds prompts, parses answers and scores them. Waits for the results (minutes), reporting progress; wait=false answers at once with a test id for rl_get_results()."
    )]
    async fn rl_test_inference(
        &self,
        Parameters(args): Parameters<TestArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        self.test_inference(args, ctx).await
    }

    #[tool(
        description = "Start a sweep: member training runs over a configuration space (W&B's sweep format: grid, random or bayes parameters, a metric to compare members by, hyperband early termination that stops the worst members). A bayes sweep suggests each member from the results so far, max_live (default 4) at a time, up to run_cap. A pbt sweep (population-based training) runs run_cap members and, every perturbation_interval steps, has the worst continue from the best ones' checkpoints with their values explored (its workflow must resume from a checkpoint path). Give a file of the workflows' sweeps/ directory by name (demo-sweep needs nothing installed) or the sweep inline. Answers at once with the sweep id and its members' run ids (a bayes sweep's first ones); follow it with rl_sweep_status(sweep_id)."
    )]
    async fn rl_start_sweep(&self, Parameters(args): Parameters<StartSweepArgs>) -> String {
        self.start_sweep(args).await
    }

    #[tool(
        description = "A sweep's leaderboard, best member first: each member's parameters, state, best and last value of the sweep's metric, readings, and why it ended (an early-terminated member says at which band); the winner once every member has ended."
    )]
    async fn rl_sweep_status(&self, Parameters(args): Parameters<SweepStatusArgs>) -> String {
        self.sweep_status(args).await
    }

    #[tool(
        description = "Stop a sweep: its pending members are cancelled and its running ones stopped (each ends stopped, its checkpoints kept). rl_resume_sweep continues it later."
    )]
    async fn rl_stop_sweep(&self, Parameters(args): Parameters<SweepIdArgs>) -> String {
        self.stop_sweep(args).await
    }

    #[tool(
        description = "Resume a sweep a stop ended: the members the stop cancelled or stopped, and those that failed with attempts left, run again (from their last checkpoints); a grid sweep goes on where it stopped, a random or bayes one adds members up to run_cap. A member that completed, or that hyperband or its user stopped, keeps its result. Refused for a sweep that ended by itself."
    )]
    async fn rl_resume_sweep(&self, Parameters(args): Parameters<SweepIdArgs>) -> String {
        self.resume_sweep(args).await
    }

    #[tool(
        description = "Check what training needs: the store, a running daemon, Python and atroposlib, environments, and keys (where each comes from, never its value). Call it when a start or test fails for an unclear reason."
    )]
    async fn rl_health_check(&self) -> String {
        self.health_check().await
    }
}
