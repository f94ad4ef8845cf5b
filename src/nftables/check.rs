//! kube-proxy's test normalisation of nftables dumps (`sortNFTablesTransaction` in
//! pkg/proxy/nftables/helpers_test.go): blank and `#` lines dropped, then a stable sort by
//! object type (table, chain, rule, set, map, element), then by object name; rules keep
//! their order within a chain, other lines of one object sort by their text.

use std::cmp::Ordering;

fn object_order(kind: &str) -> i32 {
    match kind {
        "table" => 10,
        "chain" => 9,
        "rule" => 8,
        "set" => 7,
        "map" => 6,
        "element" => 5,
        _ => 0,
    }
}

/// kube-proxy's `less`: `add OBJECTTYPE FAMILY TABLE NAME …`.
fn less(a: &str, b: &str) -> bool {
    let (wa, wb): (Vec<&str>, Vec<&str>) = (a.split(' ').collect(), b.split(' ').collect());
    if wa.len() < 5 || wb.len() < 5 {
        return false;
    }
    if wa[1] != wb[1] {
        return object_order(wa[1]) >= object_order(wb[1]);
    }
    if wa[4] != wb[4] {
        return wa[4] < wb[4];
    }
    if wa[1] == "rule" {
        return false;
    }
    a < b
}

/// The normalised text (lines joined by `\n`, no final newline, as kube-proxy compares it).
pub fn sort_like_kube_proxy_tests(text: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    lines.sort_by(|a, b| {
        if less(a, b) {
            Ordering::Less
        } else if less(b, a) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    });
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_by_type_then_name_keeping_rule_order() {
        let input = "\
add element ip kube-proxy m { b }
# comment
add rule ip kube-proxy c2 x
add rule ip kube-proxy c1 second

add rule ip kube-proxy c1 first
add element ip kube-proxy m { a }
add chain ip kube-proxy c2
add table ip kube-proxy { comment \"t\" ; }
add chain ip kube-proxy c1
add map ip kube-proxy m { type x ; }
add set ip kube-proxy s { type y ; }";
        let want = "\
add table ip kube-proxy { comment \"t\" ; }
add chain ip kube-proxy c1
add chain ip kube-proxy c2
add rule ip kube-proxy c1 second
add rule ip kube-proxy c1 first
add rule ip kube-proxy c2 x
add set ip kube-proxy s { type y ; }
add map ip kube-proxy m { type x ; }
add element ip kube-proxy m { a }
add element ip kube-proxy m { b }";
        assert_eq!(sort_like_kube_proxy_tests(input), want);
    }
}
