//! `svcproxy generate`: a deterministic synthetic cluster, as YAML.

use std::process::ExitCode;

use clap::Args;

use super::EXIT_OK;
use crate::gen::{self, GenSpec};

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Number of services
    #[arg(long, default_value_t = 1000)]
    pub services: usize,
    /// Endpoints per service
    #[arg(long, default_value_t = 10)]
    pub endpoints: usize,
    /// Random seed (the same seed gives the same cluster)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(args: &GenerateArgs) -> anyhow::Result<ExitCode> {
    super::out(&gen::yaml(&GenSpec { services: args.services, endpoints: args.endpoints, seed: args.seed }))?;
    Ok(ExitCode::from(EXIT_OK))
}
