//! The trackers and the proxier that keeps the kernel in step with them (any mode), and
//! the conntrack reconciler that runs after a sync that changed UDP endpoints, for every
//! mode alike. Synchronous. The loop in [`super::watch`] owns one; a one-shot `svcproxy
//! sync` builds one the same way and runs its first (full) sync, or a [`Pass::DryRun`] of it.

use crate::config::Config;
use crate::xtables::apply::Restorer;
use crate::conntrack::{FlowTable, Reconciled, Reconciler};
use crate::driver::Pass;
use crate::track::{Event, Trackers};

/// The mode's stateful half: what it keeps between syncs and the kernel it owns.
pub enum Proxier {
    Iptables(crate::iptables::proxier::Proxier),
    Ipvs(Box<crate::ipvs::proxier::Proxier>),
    Nftables(crate::nftables::proxier::Proxier),
}

#[derive(Debug, thiserror::Error)]
pub enum SyncFailure {
    #[error(transparent)]
    Iptables(Box<IptablesFailure>),
    #[error(transparent)]
    Ipvs(Box<crate::ipvs::proxier::Failed>),
    #[error(transparent)]
    Nftables(Box<crate::nftables::proxier::Failed>),
    #[error(transparent)]
    Sysctl(#[from] crate::node::sysctl::SysctlError),
}

/// An iptables-mode sync failed in one family; what was done before, for the one-shot report.
#[derive(Debug)]
pub struct IptablesFailure {
    pub failed: crate::iptables::proxier::Failed,
    /// The sysctls found differing before the rules were synced (set, or for a dry run not).
    pub sysctls: Vec<crate::node::sysctl::Change>,
}

// Shown as the failed family's error itself, as `#[error(transparent)]` would show it.
impl std::fmt::Display for IptablesFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.failed.fmt(f)
    }
}

impl std::error::Error for IptablesFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.failed)
    }
}

/// What one sync did, for the logs and metrics.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// iptables-restore lines sent (both modes write iptables), or in nftables mode the
    /// lines of the nft transactions.
    pub restore_lines: usize,
    /// IPVS operations sent (IPVS mode).
    pub ipvs_ops: usize,
    /// Per family, (filter, nat) rules rendered (iptables mode).
    pub rules: Vec<(crate::net::IpFamily, (usize, usize))>,
    /// Per family, the trigger times of the endpoint changes this sync programmed.
    pub trigger_times: Vec<(crate::net::IpFamily, Vec<std::time::SystemTime>)>,
    /// The families that synced in this pass, each as its kube-proxy proxier observes its
    /// own sync (a family with nothing to do is not among them).
    pub synced: Vec<FamilySync>,
    /// The conntrack reconciler's runs, per family (a dry run's list what they would delete).
    pub reconciled: Vec<Reconciled>,
    /// The sysctls a full sync found differing (set them, or, for a dry run, would).
    pub sysctls: Vec<crate::node::sysctl::Change>,
    /// What the mode's sync found and did.
    pub detail: Detail,
}

/// One family's sync in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilySync {
    pub family: crate::net::IpFamily,
    /// Whether it compared everything with the kernel (kube-proxy's full sync).
    pub full: bool,
    /// How long it took (kube-proxy times each family's proxier); IPVS mode syncs its
    /// families together, so each has the whole pass's time.
    pub took: std::time::Duration,
}

/// What one sync found and did, in the mode's own terms (a one-shot sync prints it).
#[derive(Debug, Clone)]
pub enum Detail {
    /// Per family, the iptables sync's report.
    Iptables(Vec<crate::iptables::proxier::Synced>),
    Ipvs(Box<crate::ipvs::sync::Report>),
    /// Per family, the nftables sync's report.
    Nftables(Vec<crate::nftables::sync::Report>),
}

impl Default for Detail {
    fn default() -> Self {
        Detail::Iptables(Vec::new())
    }
}

/// The trackers and the proxier that keeps the kernel in step with them.
pub struct Engine {
    pub config: Config,
    pub trackers: Trackers,
    pub proxier: Proxier,
    /// Where the mode's sysctls are re-checked on every full sync (`/proc/sys` on a node;
    /// `None`: not checked, as in tests with a fake kernel).
    pub sysctl_root: Option<std::path::PathBuf>,
    /// Per family and service with any, the ports whose Local policy finds no local
    /// endpoint, as (internal, external); kept up to date from each commit's changed
    /// services, never by a walk of every service.
    no_local: std::collections::BTreeMap<(crate::net::IpFamily, crate::model::NamespacedName), (usize, usize)>,
    /// Families whose last sync failed: the next pass retries them, changes or not.
    unsynced: std::collections::BTreeSet<crate::net::IpFamily>,
    /// Per family, the trigger times the last pass took from the trackers (a failed pass's
    /// families that synced still observe theirs).
    pub last_trigger_times: Vec<(crate::net::IpFamily, Vec<std::time::SystemTime>)>,
    /// kube-proxy's conntrack reconciler, every mode's.
    conntrack: Reconciler,
    /// Its runs in the last pass.
    last_reconciled: Vec<Reconciled>,
    /// This Node's IPs as read at start (kube-proxy's `NodeManager`: `None`, not read).
    pub node_ips_at_start: Option<Vec<std::net::IpAddr>>,
    /// Families whose rules changed outside the trackers (the ServiceCIDRs): they sync
    /// in the next pass, changes or not.
    resync: std::collections::BTreeSet<crate::net::IpFamily>,
    /// `--socket-lb` in watch mode: synced after each pass that succeeded.
    pub socket_lb: Option<crate::runner::socketlb::Live>,
    /// The Services changed since its last sync (it re-plans those alone).
    socket_lb_changed: std::collections::BTreeSet<crate::model::NamespacedName>,
}

impl Engine {
    /// iptables mode, with the kernel reached through `restorer`, its flows through `flows`.
    pub fn iptables(config: Config, trackers: Trackers, restorer: Box<dyn Restorer + Send>, flows: Box<dyn FlowTable>) -> Self {
        let p = crate::iptables::proxier::Proxier::new(&config, &trackers, restorer);
        Engine::new(config, trackers, Proxier::Iptables(p), flows)
    }

    /// IPVS mode.
    pub fn ipvs(config: Config, trackers: Trackers, proxier: crate::ipvs::proxier::Proxier, flows: Box<dyn FlowTable>) -> Self {
        Engine::new(config, trackers, Proxier::Ipvs(Box::new(proxier)), flows)
    }

    /// nftables mode, with the kernel reached through `nft`, its flows through `flows`.
    pub fn nftables(config: Config, trackers: Trackers, nft: Box<dyn crate::nftables::apply::Nft>, flows: Box<dyn FlowTable>) -> Self {
        let p = crate::nftables::proxier::Proxier::new(&config, &trackers, nft);
        Engine::new(config, trackers, Proxier::Nftables(p), flows)
    }

    /// The same engine, leaving the canaries alone (a one-shot sync: no loop will check them).
    pub fn without_canaries(self) -> Self {
        let proxier = match self.proxier {
            Proxier::Iptables(p) => Proxier::Iptables(p.without_canaries()),
            Proxier::Ipvs(mut p) => {
                p.canaries = false;
                Proxier::Ipvs(p)
            }
            other => other,
        };
        Engine { proxier, ..self }
    }

    fn new(config: Config, trackers: Trackers, proxier: Proxier, flows: Box<dyn FlowTable>) -> Self {
        // A process's first sync sees every endpoint as a change (kube-proxy's first
        // `ConntrackCleanupRequired`), including those committed before the engine was built.
        let mut conntrack = Reconciler::new(flows);
        for t in &trackers.families {
            if t.view().1.keys().any(|k| k.protocol == crate::model::Protocol::Udp) {
                conntrack.owe_all(t.family);
            }
        }
        let mut engine = Engine { config, trackers, proxier, sysctl_root: None, no_local: Default::default(), unsynced: Default::default(), last_trigger_times: Vec::new(), conntrack, last_reconciled: Vec::new(), resync: Default::default(), node_ips_at_start: None, socket_lb: None, socket_lb_changed: Default::default() };
        let all: std::collections::BTreeSet<_> =
            engine.trackers.families.iter().flat_map(|t| t.view().0.keys().map(|k| k.service.clone())).collect();
        engine.update_no_local(&all);
        engine
    }

    /// New node labels (topology): the rules depend on the zone, so every service is
    /// re-rendered. Returns whether anything changed.
    pub fn set_node_labels(&mut self, labels: std::collections::BTreeMap<String, String>) -> bool {
        if labels == self.config.node_labels {
            return false;
        }
        self.config.node_labels = labels;
        if let Some(live) = &mut self.socket_lb {
            live.replan_all();
        }
        match &mut self.proxier {
            Proxier::Iptables(p) => p.rerender(&self.config, &self.trackers),
            Proxier::Nftables(p) => p.rerender(&self.config, &self.trackers),
            Proxier::Ipvs(p) => p.forget(),
        }
        true
    }

    /// The cluster's ServiceCIDRs (from its ServiceCIDR objects). Only nftables mode's
    /// rules use them (its `cluster-ips-check` chain), and only when the `serviceCIDRs`
    /// option does not set them: the families whose chain changes sync next, a partial
    /// sync rewriting the chain. Returns whether the rules change.
    pub fn set_service_cidrs(&mut self, cidrs: Vec<crate::net::Cidr>) -> bool {
        if self.config.service_cidrs_option || cidrs == self.config.service_cidrs {
            return false;
        }
        self.config.service_cidrs = cidrs;
        match &mut self.proxier {
            Proxier::Nftables(p) => {
                let changed = p.set_service_cidrs(&self.config);
                self.resync.extend(changed.iter().copied());
                !changed.is_empty()
            }
            Proxier::Iptables(_) | Proxier::Ipvs(_) => false,
        }
    }

    pub fn apply(&mut self, events: &[Event]) {
        for e in events {
            self.trackers.apply(e);
        }
    }

    /// Whether a cold start's interim nftables table still has chains to convert.
    pub fn converting(&self) -> bool {
        matches!(&self.proxier, Proxier::Nftables(p) if p.converting())
    }

    /// Whether the interim nftables table's conversion waits for a standalone step
    /// ([`crate::nftables::proxier::Proxier::conversion_blocked`]).
    pub fn conversion_blocked(&self) -> bool {
        matches!(&self.proxier, Proxier::Nftables(p) if p.conversion_blocked())
    }

    /// The chains a cold start's interim nftables table has still to convert, per family
    /// (none outside nftables mode).
    pub fn conversion_left(&self) -> Vec<(crate::net::IpFamily, usize)> {
        match &self.proxier {
            Proxier::Nftables(p) => p.conversion_left().collect(),
            _ => Vec::new(),
        }
    }

    /// Converts the next batch of interim chains (nftables mode); the chains converted.
    /// `paced`: batches sized to a short time (a watch, where changes wait behind them),
    /// else to the fixed line bound (a one-shot sync, where nothing waits).
    pub fn convert_step(&mut self, paced: bool) -> Result<usize, crate::nftables::proxier::FamilyError> {
        match &mut self.proxier {
            Proxier::Nftables(p) => p.convert_step(paced),
            _ => Ok(0),
        }
    }

    /// (service changes, endpoint changes) waiting for a commit.
    pub fn pending(&self) -> (usize, usize) {
        self.trackers.families.iter().map(|t| (t.services.pending(), t.endpoints.pending())).fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
    }

    /// Commits the trackers and brings the kernel up to date: a `full` sync compares
    /// everything with the kernel; otherwise only what changed is sent (iptables mode).
    pub fn sync(&mut self, full: bool) -> Result<Outcome, SyncFailure> {
        self.sync_as(full, Pass::Apply)
    }

    /// [`Engine::sync`], or with [`Pass::DryRun`] a full comparison that changes nothing
    /// (the proxier decides what is sent; a one-shot `--dry-run` only prints the outcome).
    pub fn sync_as(&mut self, full: bool, pass: Pass) -> Result<Outcome, SyncFailure> {
        self.sync_pass(full, false, pass, true)
    }

    /// A watch-mode sync. kube-proxy runs one proxier per family, each syncing for its own
    /// reasons: with `every`, every family syncs (the first sync, a full or a periodic one);
    /// otherwise only the families with changes and those whose last sync failed. In iptables
    /// and nftables modes a family not syncing sends nothing; IPVS mode's one pass programs
    /// every family, observed for those that sync. A failing family does not stop the others.
    pub fn sync_families(&mut self, full: bool, every: bool) -> Result<Outcome, SyncFailure> {
        self.sync_pass(full, false, Pass::Apply, every)
    }

    /// [`Engine::sync_families`] of a full sync due only to the full-sync period: in
    /// iptables mode a family in large-cluster mode syncs partially instead (kube-proxy
    /// v1.37, #138571); the other modes sync fully.
    pub fn sync_families_periodic_full(&mut self) -> Result<Outcome, SyncFailure> {
        self.sync_pass(true, true, Pass::Apply, true)
    }

    fn sync_pass(&mut self, full: bool, periodic: bool, pass: Pass, every: bool) -> Result<Outcome, SyncFailure> {
        let changes = self.trackers.commit();
        self.update_no_local(&changes.iter().flat_map(|c| c.services.iter().cloned()).collect());
        if self.socket_lb.is_some() {
            self.socket_lb_changed.extend(changes.iter().flat_map(|c| c.services.iter().cloned()));
        }
        let trigger_times: Vec<_> = self.trackers.families.iter().zip(&changes).map(|(t, c)| (t.family, c.trigger_times.clone())).collect();
        self.last_trigger_times.clone_from(&trigger_times);
        let full = full || pass == Pass::DryRun;
        let resync = std::mem::take(&mut self.resync);
        let wanted: Vec<bool> = self
            .trackers
            .families
            .iter()
            .zip(&changes)
            .map(|(t, c)| every || !c.is_empty() || self.unsynced.contains(&t.family) || resync.contains(&t.family))
            .collect();
        for (t, c) in self.trackers.families.iter().zip(&changes) {
            if c.udp_endpoints_changed {
                self.conntrack.owe(t.family, c.services.iter().cloned());
            }
        }
        let result = self.sync_changes(&changes, full, periodic, pass, &wanted);
        self.unsynced = match &result {
            Ok(_) => Default::default(),
            Err(SyncFailure::Iptables(f)) => f.failed.failures().map(|x| x.family).collect(),
            Err(SyncFailure::Nftables(f)) => f.failures().map(|x| x.family).collect(),
            Err(SyncFailure::Ipvs(_) | SyncFailure::Sysctl(_)) => self.trackers.families.iter().map(|t| t.family).collect(),
        };
        self.reconcile(pass);
        Ok(Outcome { trigger_times, reconciled: self.last_reconciled.clone(), ..result? })
    }

    /// Runs the conntrack reconciler for each family owed a run whose rules are in place
    /// (its last sync did not fail); a dry run lists what it would delete.
    fn reconcile(&mut self, pass: Pass) {
        self.last_reconciled.clear();
        for t in &self.trackers.families {
            if self.conntrack.is_owed(t.family) && !self.unsynced.contains(&t.family) {
                let (s, e) = t.view();
                self.last_reconciled.push(self.conntrack.run(t.family, s, e, pass == Pass::DryRun));
            }
        }
    }

    fn sync_changes(&mut self, changes: &[crate::track::Changes], full: bool, periodic: bool, pass: Pass, wanted: &[bool]) -> Result<Outcome, SyncFailure> {
        match &mut self.proxier {
            Proxier::Iptables(p) => {
                // A full sync re-asserts the sysctls the rules need (someone may have reset
                // them), as it re-asserts the rules; IPVS mode checks its own every sync.
                let sysctls = match (full, &self.sysctl_root) {
                    (true, Some(root)) => iptables_sysctls(root, &self.config, pass)?,
                    _ => Vec::new(),
                };
                use crate::iptables::proxier::Full;
                let kind = if full && periodic && pass == Pass::Apply { Full::Periodic } else { Full::from(full) };
                let reports = p
                    .sync_some(&self.trackers, changes, kind, pass, wanted)
                    .map_err(|failed| SyncFailure::Iptables(Box::new(IptablesFailure { failed, sysctls: sysctls.clone() })))?;
                let restore_lines = reports.iter().map(|s| s.report.delta.restore_lines()).sum();
                let synced = reports.iter().map(|s| FamilySync { family: s.family, full: s.full, took: s.took }).collect();
                let rules = p.rule_counts();
                Ok(Outcome { restore_lines, rules, synced, sysctls, detail: Detail::Iptables(reports), ..Outcome::default() })
            }
            Proxier::Ipvs(p) => {
                let r = p.sync(&self.config, &self.trackers, changes, full, pass).map_err(|f| SyncFailure::Ipvs(Box::new(f)))?;
                let restore_lines = r.iptables.iter().map(|(_, d)| d.restore_lines()).sum();
                let whole = r.timings.read + r.timings.plan + r.timings.apply;
                let synced = self.trackers.families.iter().zip(wanted).filter(|(_, w)| **w).map(|(t, _)| FamilySync { family: t.family, full, took: whole }).collect();
                Ok(Outcome { restore_lines, ipvs_ops: r.changes.ops.len(), synced, detail: Detail::Ipvs(Box::new(r)), ..Outcome::default() })
            }
            Proxier::Nftables(p) => {
                let reports = p.sync_some(&self.trackers, changes, full, pass, wanted).map_err(|f| SyncFailure::Nftables(Box::new(f)))?;
                let restore_lines = reports.iter().map(|s| s.report.lines).sum();
                let synced = reports.iter().map(|s| FamilySync { family: s.family, full: s.full, took: s.took }).collect();
                Ok(Outcome { restore_lines, synced, detail: Detail::Nftables(reports.into_iter().map(|s| s.report).collect()), ..Outcome::default() })
            }
        }
    }
}

/// iptables mode's sysctls that differ under `root`: set (and returned), or for a dry run
/// only returned.
fn iptables_sysctls(root: &std::path::Path, config: &Config, pass: Pass) -> Result<Vec<crate::node::sysctl::Change>, SyncFailure> {
    let wanted = crate::node::sysctl::iptables(config);
    Ok(match pass {
        Pass::Apply => crate::node::sysctl::ensure(root, &wanted)?,
        Pass::DryRun => crate::node::sysctl::changes(root, &wanted),
    })
}

impl Engine {
    /// Per family, service ports whose Local policy has no local endpoint, as (internal,
    /// external): kube-proxy's `sync_proxy_rules_no_local_endpoints_total{ip_family}`.
    pub fn no_local_endpoints(&self) -> Vec<(crate::net::IpFamily, (usize, usize))> {
        let mut out: Vec<_> = self.trackers.families.iter().map(|t| (t.family, (0, 0))).collect();
        for ((family, _), count) in &self.no_local {
            if let Some((_, sum)) = out.iter_mut().find(|(f, _)| f == family) {
                *sum = (sum.0 + count.0, sum.1 + count.1);
            }
        }
        out
    }

    /// Per family, (filter, nat) rules of the rendered rulesets (iptables mode; none in the
    /// other modes): kube-proxy's `sync_proxy_rules_iptables_total`.
    pub fn rule_counts(&self) -> Vec<(crate::net::IpFamily, (usize, usize))> {
        match &self.proxier {
            Proxier::Iptables(p) => p.rule_counts(),
            Proxier::Ipvs(_) | Proxier::Nftables(_) => Vec::new(),
        }
    }

    /// The conntrack reconciler's runs in the last pass (a failed pass's too).
    pub fn reconciled(&self) -> Vec<Reconciled> {
        self.last_reconciled.clone()
    }

    /// Recounts the given services' ports (as committed) in every family.
    fn update_no_local(&mut self, services: &std::collections::BTreeSet<crate::model::NamespacedName>) {
        for id in services {
            for t in &self.trackers.families {
                let (s, e) = t.view();
                let count = crate::select::no_local_endpoints_of(s, e, id);
                let key = (t.family, id.clone());
                if count == (0, 0) {
                    self.no_local.remove(&key);
                } else {
                    self.no_local.insert(key, count);
                }
            }
        }
    }
}

/// Where a canary was found gone: an iptables table (iptables and IPVS modes), or in IPVS
/// mode `kube-ipvs0` or `ipvs` (see [`crate::ipvs::canary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanaryLost {
    pub family: crate::net::IpFamily,
    pub table: &'static str,
}

impl Engine {
    /// Whether this mode keeps canaries (iptables and IPVS modes: both sync partially from
    /// memory between full syncs).
    pub fn has_canaries(&self) -> bool {
        matches!(self.proxier, Proxier::Iptables(_) | Proxier::Ipvs(_))
    }

    /// Checks the canaries: `Some` when one is gone and the next sync must be full.
    pub fn canary_lost(&mut self) -> Result<Option<CanaryLost>, crate::xtables::apply::RestoreError> {
        match &mut self.proxier {
            Proxier::Iptables(p) => Ok(p.canary_lost()?.map(|(family, table)| CanaryLost { family, table })),
            Proxier::Ipvs(p) => Ok(p.lost()?.map(|(family, table)| CanaryLost { family, table })),
            Proxier::Nftables(_) => Ok(None),
        }
    }

    /// nftables mode with `KubeProxyNFTablesLocalhostNodePorts`: the families whose
    /// userspace proxy serves TCP localhost NodePorts (their `nodePortAddresses` name
    /// loopback), as kube-proxy v1.37 creates one per such family's proxier.
    pub fn localhost_proxy_families(&self) -> Vec<crate::net::IpFamily> {
        if self.config.mode != crate::config::Mode::Nftables || !self.config.nft_localhost_node_ports {
            return Vec::new();
        }
        self.trackers.families.iter().map(|t| t.family).filter(|f| self.config.node_port_addresses_name_loopback(*f)).collect()
    }

    /// The TCP NodePorts `family`'s localhost proxy serves now, from the committed maps;
    /// `None` when the family's last sync failed (kube-proxy updates its listeners only
    /// after a sync that succeeded).
    pub fn localhost_node_ports(&self, family: crate::net::IpFamily) -> Option<Vec<crate::serve::localhost_nodeports::Spec>> {
        if self.unsynced.contains(&family) {
            return None;
        }
        let t = self.trackers.families.iter().find(|t| t.family == family)?;
        let (s, e) = t.view();
        let zone = self.config.node_labels.get(crate::model::LABEL_ZONE).map(String::as_str);
        let here = crate::select::Locality { node_name: &self.config.node_name, zone };
        Some(crate::serve::localhost_nodeports::specs(s, e, here))
    }

    /// Watch mode's socket-LB sync after a pass (`None`: `--socket-lb` is off): the
    /// Services changed since the last one planned again, or every Service when it needs.
    pub fn sync_socket_lb(&mut self) -> Option<Result<crate::runner::socketlb::Report, crate::netfilter::bpf::BpfError>> {
        let changed = std::mem::take(&mut self.socket_lb_changed);
        let names: std::collections::BTreeSet<crate::model::NamespacedName> = if self.socket_lb.as_ref()?.needs_all() {
            self.trackers.families.iter().flat_map(|t| t.view().0.keys().map(|k| k.service.clone())).collect()
        } else {
            changed
        };
        let mut planned = std::collections::BTreeMap::new();
        for name in names {
            let mut wanted = crate::socketlb::plan::Wanted::new();
            for t in &self.trackers.families {
                let (s, e) = t.view();
                let scope = crate::socketlb::plan::Scope::of(&self.config, t.family);
                wanted.extend(crate::socketlb::plan::wanted_of(s, e, scope, &name));
            }
            planned.insert(name, wanted);
        }
        self.socket_lb.as_mut().map(|live| live.sync(planned))
    }

    /// The socket-LB entries every family's committed maps want (one set of maps holds
    /// both families, keyed by address).
    pub fn socket_lb_wanted(&self) -> crate::socketlb::plan::Wanted {
        let mut out = crate::socketlb::plan::Wanted::new();
        for t in &self.trackers.families {
            let (s, e) = t.view();
            out.extend(crate::socketlb::plan::wanted(s, e, crate::socketlb::plan::Scope::of(&self.config, t.family)));
        }
        out
    }

    /// Local endpoint counts per health-check node port, over all families.
    pub fn health_check_counts(&self) -> std::collections::BTreeMap<u16, (crate::model::NamespacedName, usize)> {
        let mut out = std::collections::BTreeMap::new();
        for t in &self.trackers.families {
            let (s, e) = t.view();
            for (port, (svc, n)) in crate::serve::healthcheck::local_counts(s, e) {
                let entry = out.entry(port).or_insert((svc, 0));
                entry.1 += n;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
