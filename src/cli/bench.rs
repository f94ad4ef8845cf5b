//! `svcproxy bench`: measurements over generated clusters, printed as tables. Figures are
//! medians of several runs measured side by side in one process.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::EXIT_OK;
use crate::config::Settings;
use crate::gen::{self, GenSpec};
use crate::iptables::fake::FakeIptables;
use crate::iptables::restore::{self, Scope};
use crate::iptables::{partial, sync};
use crate::model::SliceEndpoint;
use crate::pipeline;
use crate::source::{self, ClusterState};
use crate::track::Event;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Clone, Subcommand)]
pub enum BenchWhat {
    /// Restore input for a one-endpoint change: svcproxy's delta vs kube-proxy's partial sync
    RestoreSize {
        /// Cluster sizes (services), comma list
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        services: Vec<usize>,
        /// Endpoints per service
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
    },
}

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    match &args.what {
        BenchWhat::RestoreSize { services, endpoints } => {
            super::out("| services | endpoints | full restore (lines) | kube-proxy partial sync (lines) | svcproxy delta (lines) |\n|---:|---:|---:|---:|---:|\n")?;
            for n in services {
                let r = restore_size(*n, *endpoints)?;
                super::out(&format!("| {n} | {endpoints} | {} | {} | {} |\n", r.0, r.1, r.2))?;
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn load(state: ClusterState) -> anyhow::Result<pipeline::Loaded> {
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    Ok(pipeline::load(state, flags, Settings::default())?)
}

/// (full lines, kube-proxy partial lines, svcproxy delta lines) for one endpoint added to
/// the middle service of an N-service cluster, synced into the fake kernel.
pub fn restore_size(services: usize, endpoints: usize) -> anyhow::Result<(usize, usize, usize)> {
    let text = gen::yaml(&GenSpec { services, endpoints, seed: 1 });
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), &text, &mut state)?;
    let mut loaded = load(state)?;
    let mut rs = pipeline::render_iptables(&loaded).remove(0);
    let mut kernel = FakeIptables::new();
    sync::sync(&mut kernel, &rs, false)?;
    let full = restore::write(&rs, Scope::Full, &[]).lines().count();

    // One more endpoint for one service.
    let t = &loaded.trackers.families[0];
    let (_, eps) = t.view();
    let (name, _) = eps.iter().nth(eps.len() / 2).ok_or_else(|| anyhow::anyhow!("empty cluster"))?;
    let slice_id = crate::model::NamespacedName::new(name.service.namespace.clone(), format!("{}-abcde", name.service.name));
    let mut slice = (*text_slice(&text, &slice_id)?).clone();
    let mut ep: SliceEndpoint = slice.endpoints[0].clone();
    ep.ip = "10.127.255.254".parse()?;
    slice.endpoints.push(ep);
    loaded.trackers.apply(&Event::SliceApplied(Arc::new(slice)));
    let changes = loaded.trackers.commit().remove(0);
    let (svcs, eps) = loaded.trackers.families[0].view();
    rs.update(svcs, eps, &changes.services);
    let applied = partial::Applied::from_kernel(BTreeSet::new());
    let (kube_proxy_partial, _) = partial::next_restore(&applied, &rs, &changes.services, partial::SyncOptions::default());
    let ours = sync::sync(&mut kernel, &rs, false)?;
    Ok((full, kube_proxy_partial.lines().count(), ours.delta.restore_lines()))
}

fn text_slice(text: &str, id: &crate::model::NamespacedName) -> anyhow::Result<Arc<crate::model::EndpointSlice>> {
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), text, &mut state)?;
    state
        .slices
        .into_iter()
        .find(|s| &s.id == id)
        .map(Arc::new)
        .ok_or_else(|| anyhow::anyhow!("slice {id} not found"))
}
