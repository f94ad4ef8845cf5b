//! `svcproxy render`: cluster state in, rules out. Touches nothing on the node.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use super::{ConfigFlags, EXIT_OK};
use crate::config::{Mode, Settings};
use crate::pipeline;
use crate::source;

pub const EXAMPLES: &str = "\
Examples:
  svcproxy render --from fixtures/demo.yaml
  kubectl get svc,endpointslices,nodes -A -o yaml | svcproxy render --from - --hostname-override node-1
  svcproxy render --from dump.yaml --ip-family both --output json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// iptables-restore input (nftables mode: `nft -f` input), exactly what would be applied
    Restore,
    /// the same rules as JSON (tables, chains, rules; nftables mode: sets and elements too)
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct RenderArgs {
    #[command(flatten)]
    pub config: ConfigFlags,

    /// Output format
    #[arg(long, value_enum, default_value = "restore")]
    pub output: Output,
}

/// Reads the inputs and loads them: the shared first half of every command.
pub fn load(flags: &ConfigFlags) -> anyhow::Result<pipeline::Loaded> {
    load_with(flags, flags.settings())
}

/// [`load`] with a settings layer the command has adjusted.
pub fn load_with(flags: &ConfigFlags, settings: Settings) -> anyhow::Result<pipeline::Loaded> {
    let mut state = source::read_path(flags.from_path()?)?;
    crate::derive::complete_with_notes(&mut state, flags.derive_endpoints);
    let file = super::flags::config_file(flags.config.as_deref(), "svcproxy: note: ")?;
    let loaded = pipeline::load(state, settings, file).context("invalid configuration")?;
    for note in &loaded.notes {
        eprintln!("svcproxy: note: {note}");
    }
    Ok(loaded)
}

pub fn run(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.config)?;
    if loaded.config.mode == Mode::Ipvs {
        if args.output == Output::Json {
            anyhow::bail!("--mode ipvs: only --output restore is supported");
        }
        let plans = crate::ipvs::plan_all(&loaded.config, &loaded.trackers);
        super::out(&crate::ipvs::text::render(&plans))?;
        return Ok(ExitCode::from(EXIT_OK));
    }
    if loaded.config.mode == Mode::Nftables {
        let rulesets = crate::nftables::render_all(&loaded.config, &loaded.trackers);
        match args.output {
            Output::Restore => super::out(&crate::nftables::text(&rulesets, crate::nftables::model::Form::Transaction))?,
            Output::Json => {
                let tables: Vec<_> = rulesets.iter().map(|r| r.table()).collect();
                super::out(&format!("{}\n", serde_json::to_string_pretty(&tables)?))?
            }
        }
        return Ok(ExitCode::from(EXIT_OK));
    }
    let rulesets = pipeline::render_iptables(&loaded);
    drop(loaded);
    match args.output {
        Output::Restore => stream(&rulesets)?,
        Output::Json => super::out(&format!("{}\n", serde_json::to_string_pretty(&json_rules(&rulesets)?)?))?,
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// Writes the restore text to stdout as it is produced (it is tens of megabytes for a
/// large cluster; nothing needs it whole).
fn stream(rulesets: &[crate::iptables::render::Ruleset]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut failed = None;
    pipeline::emit_iptables(rulesets, |s| {
        if failed.is_none() {
            failed = out.write_all(s.as_bytes()).err();
        }
    });
    match failed {
        Some(e) => Err(e),
        None => out.flush(),
    }
}

fn json_rules(rulesets: &[crate::iptables::render::Ruleset]) -> anyhow::Result<serde_json::Value> {
    use crate::iptables::restore::{self, Scope};
    let mut families = Vec::new();
    for rs in rulesets {
        let dump = restore::dump(rs, Scope::Full, &[]);
        let tables: Vec<serde_json::Value> = dump
            .order
            .iter()
            .map(|name| {
                let t = &dump.tables[name];
                let chains: Vec<serde_json::Value> = t
                    .chains
                    .iter()
                    .map(|c| {
                        let rules: Vec<Vec<&str>> = t.rules_of(&c.name).map(|r| r.args.words()).collect();
                        serde_json::json!({ "name": c.name.as_str(), "rules": rules })
                    })
                    .collect();
                serde_json::json!({ "table": name, "chains": chains })
            })
            .collect();
        families.push(serde_json::json!({ "family": rs.ctx.node.family, "tables": tables }));
    }
    Ok(serde_json::Value::Array(families))
}
