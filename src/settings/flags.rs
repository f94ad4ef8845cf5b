//! The settings' flags, built from the table: kube-proxy's names (and svcproxy's aliases),
//! pflag's syntax (`--flag=v` or `--flag v`; a bool flag alone means true; lists are
//! comma-separated and repeatable). A setting is in the layer only if its flag was given.
//!
//! [`RuleFlags`] (settings that change the rules) go on every command that builds rules;
//! [`NodeFlags`] (API client, servers, timing, kernel tuning) on `sync` only.

use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};

use super::value::FlagShape;
use super::{Info, Scope, Settings, TABLE};

fn rows(scope: Scope) -> impl Iterator<Item = &'static Info> {
    TABLE.iter().filter(move |i| i.scope == scope && !i.flags.is_empty())
}

fn arg(info: &'static Info) -> Arg {
    let name = info.flags[0];
    let mut a = Arg::new(info.name)
        .long(name)
        .help(info.help)
        .value_name(info.value_name)
        .action(ArgAction::Append)
        .allow_hyphen_values(matches!(info.value_name, "N" | "NUMBER"));
    if name.len() == 1 {
        // klog's -v / --v.
        a = a.short(name.chars().next().expect("one char"));
    }
    for alias in &info.flags[1..] {
        a = a.visible_alias(*alias);
    }
    if info.shape == FlagShape::Bool {
        a = a.num_args(0..=1).default_missing_value("true");
    }
    if info.name == "hostname_override" {
        // The downward API's usual variable (kube-proxy DaemonSets pass it as the flag).
        a = a.env("NODE_NAME");
    }
    a
}

fn augment(cmd: Command, scope: Scope) -> Command {
    rows(scope).fold(cmd, |cmd, info| cmd.arg(arg(info)))
}

fn layer(m: &ArgMatches, scope: Scope) -> Result<Settings, clap::Error> {
    let mut s = Settings::default();
    for info in rows(scope) {
        let Ok(Some(values)) = m.try_get_many::<String>(info.name) else { continue };
        for v in values {
            if let Some(Err(e)) = s.set_from_flag(info.flags[0], v) {
                return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("--{}: {e}\n", info.flags[0])));
            }
        }
    }
    Ok(s)
}

macro_rules! flag_group {
    ($name:ident, $scope:expr) => {
        /// The flags of the settings in one [`Scope`], as a layer.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name(pub Settings);

        impl FromArgMatches for $name {
            fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
                layer(m, $scope).map($name)
            }
            fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
                self.0 = layer(m, $scope)?.over(std::mem::take(&mut self.0));
                Ok(())
            }
        }

        impl clap::Args for $name {
            fn augment_args(cmd: Command) -> Command {
                augment(cmd, $scope)
            }
            fn augment_args_for_update(cmd: Command) -> Command {
                augment(cmd, $scope)
            }
        }
    };
}

flag_group!(RuleFlags, Scope::Rules);
flag_group!(NodeFlags, Scope::Node);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::super::kinds::{LogFormat, ProxyMode};
    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        rules: RuleFlags,
        #[command(flatten)]
        node: NodeFlags,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kube-proxy").chain(args.iter().copied()))
    }

    #[test]
    fn kube_proxy_syntax() {
        let c = parse(&[
            "--proxy-mode=ipvs",
            "--masquerade-all",
            "--nfacct",
            "false",
            "--iptables-sync-period=1m0s",
            "--v=4",
            "--feature-gates=A=true,B=false",
            "--nodeport-addresses=10.0.0.0/8",
            "--nodeport-addresses",
            "192.168.0.0/16",
            "--conntrack-max-per-core=0",
            "--oom-score-adj=-999",
            "--kube-api-qps=-1",
            "--healthz-bind-address=127.0.0.1",
        ])
        .unwrap();
        let (r, n) = (c.rules.0, c.node.0);
        assert_eq!(r.mode, Some(ProxyMode::Ipvs));
        assert_eq!((r.masquerade_all, r.nfacct), (Some(true), Some(false)));
        assert_eq!(r.node_port_addresses.map(|v| v.len()), Some(2));
        assert_eq!(r.feature_gates.map(|g| g.len()), Some(2));
        assert_eq!(n.iptables_sync_period, Some(Duration::from_secs(60)));
        assert_eq!((n.log_verbosity, n.conntrack_max_per_core, n.oom_score_adj), (Some(4), Some(0), Some(-999)));
        assert_eq!(n.kube_api_qps, Some(-1.0));
        assert_eq!(n.healthz_bind_address.as_deref(), Some("127.0.0.1"));
        assert_eq!(n.mode, None, "each setting in one group");
    }

    #[test]
    fn svcproxys_aliases_and_klogs_short_v() {
        let c = parse(&["--mode", "iptables", "--masquerade-bit=15", "-v", "2", "--log-format=json"]).unwrap();
        assert_eq!((c.rules.0.mode, c.rules.0.masquerade_bit), (Some(ProxyMode::Iptables), Some(15)));
        assert_eq!((c.node.0.log_verbosity, c.node.0.log_format), (Some(2), Some(LogFormat::Json)));
    }

    #[test]
    fn a_bad_value_names_the_flag() {
        let e = parse(&["--iptables-sync-period=30"]).unwrap_err().to_string();
        assert!(e.contains("--iptables-sync-period") && e.contains("duration"), "{e}");
        let e = parse(&["--masquerade-all=yes"]).unwrap_err().to_string();
        assert!(e.contains("--masquerade-all"), "{e}");
    }

    #[test]
    fn nothing_given_is_an_empty_layer() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.node.0, Settings::default());
        // NODE_NAME may be set in the environment running the tests: only that may appear.
        assert_eq!(Settings { hostname_override: None, ..c.rules.0 }, Settings::default());
    }
}
