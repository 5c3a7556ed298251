//! Reading the fields of `INFO` and `CLUSTER INFO` answers.

/// The value of `name:value` in `INFO` or `CLUSTER INFO` output.
pub(super) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A replication offset in `INFO replication` (0 if absent).
pub(super) fn offset(info: &str, name: &str) -> u64 {
    info_field(info, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(super) fn is_primary(replication_info: &str) -> bool {
    info_field(replication_info, "role") == Some("master")
}

/// The sum of `calls=` over the `cmdstat_*` lines of `INFO commandstats`.
pub(super) fn total_calls(info: &str) -> u64 {
    info.lines()
        .filter(|line| line.starts_with("cmdstat_"))
        .filter_map(|line| {
            let (_, stats) = line.split_once(':')?;
            stats
                .split(',')
                .find_map(|stat| stat.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_found_by_exact_name() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
                    slave0:ip=127.0.0.1,port=7004,state=online,offset=14,lag=0\r\n";
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "connected_slaves"), Some("1"));
        assert_eq!(info_field(info, "connected"), None);
        assert!(is_primary(info));
        assert!(!is_primary("role:slave\r\n"));
    }

    #[test]
    fn total_calls_sums_every_command() {
        let info = "# Commandstats\r\n\
            cmdstat_get:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=4,usec_per_call=2.00,rejected_calls=0\r\n\
            role:master\r\n";
        assert_eq!(total_calls(info), 5);
        assert_eq!(total_calls("# Commandstats\r\n"), 0);
    }
}
