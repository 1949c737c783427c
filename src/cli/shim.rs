use std::path::PathBuf;
use std::process::ExitCode;

use lachesis::launch::shim::{self, ShimArgs};
use lachesis::launch::status::StageFiles;

#[derive(clap::Args)]
pub struct ShimCommand {
    #[arg(long)]
    started: PathBuf,
    #[arg(long)]
    exit: PathBuf,
    #[arg(long)]
    log: PathBuf,
    #[arg(long)]
    cwd: PathBuf,
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

pub fn run(args: ShimCommand) -> ExitCode {
    let code = shim::run(ShimArgs {
        files: StageFiles { started: args.started, exit: args.exit },
        log: args.log,
        cwd: args.cwd,
        argv: args.argv,
    });
    ExitCode::from(code as u8)
}
