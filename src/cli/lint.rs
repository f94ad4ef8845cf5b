//! `svcproxy lint`: the API server's repair checks and the endpoint controllers' view
//! over a cluster dump. Exit code: 0 clean (or info only), 1 warnings, 3 errors
//! (2 stays "could not run", as for every command).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::{EXIT_OK, EXIT_CHANGES};
use crate::derive;
use crate::lint::{self, Finding, NodePortRange, Options, ServiceRanges, Severity};
use crate::source;

/// Exit code when a finding is an error (2 means svcproxy could not run).
pub const EXIT_LINT_ERRORS: u8 = 3;
/// Exit code when the worst finding is a warning.
pub const EXIT_LINT_WARNINGS: u8 = EXIT_CHANGES;

pub const AFTER_HELP: &str = "\
Examples:
  kubectl get svc,endpointslices,endpoints,pods,nodes -A -o yaml > dump.yaml
  svcproxy lint --from dump.yaml --service-cluster-ip-range 10.96.0.0/12
  svcproxy lint --from dump.yaml --output json

Exit codes: 0 no findings or only info, 1 warnings (no errors), 3 errors,
2 svcproxy could not run (bad input or flags).

Checks (code, severity):
  SP001 error    ClusterIP assigned to more than one Service
  SP002 error    ClusterIP outside --service-cluster-ip-range
  SP003 warning  ClusterIP outside every ServiceCIDR
  SP010 error    NodePort assigned to more than one Service
  SP011 error    NodePort outside --service-node-port-range
  SP020 warning  the default/kubernetes Service is missing
  SP021 error    kubernetes Service ClusterIP is not the service range's first address
  SP022 error    kubernetes Service lacks port https 443/TCP
  SP023 warning  kubernetes Service has a selector
  SP024 warning  kubernetes Service has no endpoints
  SP025 warning  kubernetes Service targetPort differs from the API servers' port
  SP030 warning  EndpointSlice whose Service does not exist
  SP031 warning  Endpoints whose Service does not exist
  SP040 warning  selector matches no Pod
  SP041 warning  endpoint refers to a Pod that does not exist
  SP042 warning  endpoint is ready but its Pod is not
  SP043 warning  named targetPort resolves on none of the selected Pods
  SP044 info     selected Pod has no IP yet
  SP045 info     named targetPort missing on some selected Pods
  SP046 info     selected Pod runs on a Node the input does not hold
  SP050 error    external IP is another Service's ClusterIP
  SP051 error    load-balancer IP is a Service's ClusterIP
  SP052 warning  external IPs get no rules (AllowServiceExternalIPs off)
  SP060 info     EndpointSlices derived from Pods or v1/Endpoints
  SP061 info     v1/Endpoints not mirrored
  SP090 info     skipped while reading
  SP091 warning  service port has no endpoints in any of its EndpointSlices
  SP092 info     EndpointSlice of an IP family the Service does not have
Pod checks (SP04x) run only when the input holds Pods; SP002 and SP021 only with
--service-cluster-ip-range; SP003 only when it holds ServiceCIDR objects; SP052 only
with --feature-gates AllowServiceExternalIPs=false.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LintOutput {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct LintArgs {
    /// Cluster state: a YAML/JSON file, a directory of them, or - for stdin
    #[arg(long, value_name = "PATH")]
    pub from: PathBuf,

    /// The API server's service CIDRs (comma list, one per family, primary first)
    #[arg(long, value_name = "CIDRS")]
    pub service_cluster_ip_range: Option<String>,

    /// The API server's NodePort range
    #[arg(long, value_name = "LOW-HIGH", default_value = "30000-32767")]
    pub service_node_port_range: String,

    /// Derive every Service's EndpointSlices from Pods and v1/Endpoints, replacing the input's
    #[arg(long)]
    pub derive_endpoints: bool,

    /// kube-proxy's feature gates (NAME=true|false,...), checked as kube-proxy checks them:
    /// with AllowServiceExternalIPs=false, Services' external IPs are reported as unserved
    #[arg(long, value_name = "NAME=BOOL,...")]
    pub feature_gates: Option<String>,

    #[arg(long, value_enum, default_value = "text")]
    pub output: LintOutput,
}

#[derive(Serialize)]
struct Summary {
    errors: usize,
    warnings: usize,
    infos: usize,
}

#[derive(Serialize)]
struct Report<'a> {
    findings: &'a [Finding],
    summary: Summary,
}

pub fn run(args: &LintArgs) -> anyhow::Result<ExitCode> {
    let gates = match &args.feature_gates {
        Some(text) => <std::collections::BTreeMap<String, bool> as crate::settings::value::SettingValue>::parse_flag(text)
            .and_then(|g| crate::settings::gates::check(&g).map(|()| g))
            .map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?,
        None => Default::default(),
    };
    let options = Options {
        service_ranges: args.service_cluster_ip_range.as_deref().map(ServiceRanges::parse).transpose()?,
        node_port_range: NodePortRange::parse(&args.service_node_port_range)?,
        external_ips_off: !crate::settings::gates::enabled(&gates, "AllowServiceExternalIPs"),
    };
    let mut state = source::read_path(&args.from)?;
    let derived = derive::complete(&mut state, args.derive_endpoints);
    let findings = lint::run(&lint::Input { state: &state, derived: &derived, options: &options });
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let summary = Summary { errors: count(Severity::Error), warnings: count(Severity::Warning), infos: count(Severity::Info) };
    match args.output {
        LintOutput::Json => {
            let report = Report { findings: &findings, summary };
            super::out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
        }
        LintOutput::Text => super::out(&text(&findings, &summary))?,
    }
    Ok(ExitCode::from(exit_code(lint::worst(&findings))))
}

/// 0 for nothing or info, 1 for warnings, 3 for errors.
pub fn exit_code(worst: Option<Severity>) -> u8 {
    match worst {
        None | Some(Severity::Info) => EXIT_OK,
        Some(Severity::Warning) => EXIT_LINT_WARNINGS,
        Some(Severity::Error) => EXIT_LINT_ERRORS,
    }
}

fn text(findings: &[Finding], s: &Summary) -> String {
    let mut out = String::new();
    for f in findings {
        let objects: Vec<String> = f.objects.iter().map(ToString::to_string).collect();
        let objects = if objects.is_empty() { String::new() } else { format!(" {}:", objects.join(", ")) };
        out.push_str(&format!("{}[{}]{objects} {}\n", f.severity, f.code, f.message));
        if !f.locations.is_empty() {
            out.push_str(&format!("  --> {}\n", f.locations.join(", ")));
        }
    }
    if findings.is_empty() {
        out.push_str("no findings\n");
    } else {
        out.push_str(&format!("{} error(s), {} warning(s), {} info\n", s.errors, s.warnings, s.infos));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_code_with_its_severity() {
        for (code, severity, _) in lint::CODES {
            let line = format!("  {code} {severity:<8} ");
            assert!(AFTER_HELP.contains(&line), "{line:?} missing from the help");
        }
        assert_eq!(AFTER_HELP.matches("\n  SP").count(), lint::CODES.len());
    }
}
