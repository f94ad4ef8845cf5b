//! The one path from inputs to rules, shared by the CLI and the tests: settings layers
//! and cluster state in; a resolved config, committed trackers and rendered rulesets out.

use std::sync::Arc;

use crate::config::{self, Config, ConfigError, Settings};
use crate::iptables::render::{self, Ruleset};
use crate::iptables::restore::{self, Scope};
use crate::net::IpFamily;
use crate::source::{ClusterState, Note, Objects};
use crate::track::Trackers;

/// Cluster state loaded into committed trackers.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub trackers: Trackers,
    pub notes: Vec<Note>,
}

/// Stacks the settings (`flags` over `file` over the fixture's options), resolves them,
/// and feeds every object to fresh trackers, then commits.
pub fn load(mut state: ClusterState, flags: Settings, file: Settings) -> Result<Loaded, ConfigError> {
    let objects = Objects::take(&mut state);
    load_objects(state, &objects, flags, file)
}

/// [`load`] of `objects` (with the rest of their read in `state`), whose `Arc`s the
/// trackers then share with the caller (the file watch keeps them to diff the next read).
pub fn load_objects(state: ClusterState, objects: &Objects, flags: Settings, file: Settings) -> Result<Loaded, ConfigError> {
    config::check_log_flush_frequency(&flags, &file)?;
    let fixture = state.fixture.as_ref().map(Settings::from_fixture).unwrap_or_default();
    let settings = flags.over(file).over(fixture);
    let chosen = settings.ip_family.is_some_and(|f| f != crate::settings::kinds::Families::Auto);
    let mut config = config::resolve(settings, &state.nodes)?;
    // The ServiceCIDR objects, unless the `serviceCIDRs` option overrides them.
    if config.service_cidrs.is_empty() {
        config.service_cidrs = crate::model::service_cidrs(&state.service_cidrs);
    }
    let mut notes = state.notes;
    if !chosen {
        notes.extend(family_left_out(&config.families, &objects.services));
    }
    if !config.allow_external_ips {
        notes.extend(external_ips_unserved(&objects.services));
    }
    let mut trackers = Trackers::new(&config.families, &config.node_name, config.service_proxy_name.clone());
    trackers.set_allow_external_ips(config.allow_external_ips);
    for e in objects.applied() {
        trackers.apply(&e);
    }
    trackers.commit();
    Ok(Loaded { config, trackers, notes })
}

/// A note when `AllowServiceExternalIPs=false` leaves Services' external IPs without rules
/// (what `trace` and `render` then say about them).
fn external_ips_unserved(services: &[Arc<crate::model::Service>]) -> Option<crate::source::Note> {
    let with: Vec<&Arc<crate::model::Service>> = services.iter().filter(|s| !s.external_ips.is_empty()).collect();
    let first = with.first()?;
    let ips: Vec<String> = first.external_ips.iter().map(ToString::to_string).collect();
    Some(crate::source::Note {
        path: std::path::PathBuf::new(),
        line: 0,
        text: format!(
            "{} Service(s) (first {}: {}) have spec.externalIPs, which get no rules: the feature gate AllowServiceExternalIPs is off (kube-proxy v1.37, KEP-5707)",
            with.len(),
            first.id,
            ips.join(", ")
        ),
    })
}

/// A note when the families chosen automatically (from the node's IPs and cluster CIDRs)
/// leave out Services' cluster IPs of another family, which would otherwise vanish silently.
fn family_left_out(families: &[IpFamily], services: &[Arc<crate::model::Service>]) -> Option<crate::source::Note> {
    let left: Vec<&Arc<crate::model::Service>> =
        services.iter().filter(|s| s.cluster_ips.iter().any(|ip| !families.contains(&IpFamily::of(ip)))).collect();
    let first = left.first()?;
    let other = first.cluster_ips.iter().map(IpFamily::of).find(|f| !families.contains(f))?;
    Some(crate::source::Note {
        path: std::path::PathBuf::new(),
        line: 0,
        text: format!(
            "{} Service(s) (first {}) have {other} cluster IPs, but the families chosen for this node are {}: their {other} rules are not rendered (no Node object or {other} --node-ip/--cluster-cidr says this node has {other}); use --ip-family both to render them",
            left.len(),
            first.id,
            families.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ")
        ),
    })
}

/// The socket-LB entries the committed trackers want, every family's (what `sync
/// --socket-lb` writes; `trace --socket-lb` reads them).
pub fn socket_lb_wanted(loaded: &Loaded) -> crate::socketlb::plan::Wanted {
    let mut out = crate::socketlb::plan::Wanted::new();
    for t in &loaded.trackers.families {
        let (s, e) = t.view();
        out.extend(crate::socketlb::plan::wanted(s, e, crate::socketlb::plan::Scope::of(&loaded.config, t.family)));
    }
    out
}

/// Renders every family's iptables ruleset.
pub fn render_iptables(loaded: &Loaded) -> Vec<Ruleset> {
    render::render_families(&loaded.config, &loaded.trackers)
}

/// The full restore text of every family: IPv4 first, IPv6 under a `# ip6tables` header
/// when there are both.
pub fn iptables_text(rulesets: &[Ruleset]) -> String {
    // Sized once: a 10,000-service text is 40 MB, and growing it by doubling copies it again.
    let mut out = String::with_capacity(rulesets.iter().map(|rs| restore::size_hint(rs, Scope::Full) + 16).sum());
    emit_iptables(rulesets, |s| out.push_str(s));
    out
}

/// [`iptables_text`], handed to `sink` piece by piece.
pub fn emit_iptables(rulesets: &[Ruleset], mut sink: impl FnMut(&str)) {
    for rs in rulesets {
        if rulesets.len() > 1 {
            sink(if rs.ctx.node.family == IpFamily::V6 { "# ip6tables\n" } else { "# iptables\n" });
        }
        restore::emit(rs, Scope::Full, &[], &mut sink);
    }
}
