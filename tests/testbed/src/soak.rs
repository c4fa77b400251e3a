//! The churn soak's verdict, from the output of `tests/guest/churn.sh`
//! (shared by the VM test `churn_soak_leaves_tierd_flat_and_no_series_behind`
//! and `cargo xtask bench`).

/// What a churn soak showed. `problems` is empty when tierd passed: it stayed
/// up, its RSS grew by at most [`RSS_GROWTH_KIB`] and its open fds by at most
/// [`FD_GROWTH`] from the warm-up to the end, every series of a churned
/// cgroup was gone at the end, it exited 0 on SIGTERM leaving no kdamond,
/// and at least `min_churned` containers went through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SoakReport {
    /// Containers created and destroyed during the soak.
    pub churned: i64,
    /// (seconds into the soak, RSS KiB, open fds, churned-cgroup series):
    /// the warm-up baseline first (t = 0), the end last.
    pub samples: Vec<(i64, i64, i64, i64)>,
    /// tierd's peak RSS (VmHWM) at the end, KiB, when the END line has it.
    pub peak_rss_kib: Option<i64>,
    /// `tierd_loop_errors_total` at the end (errors counted, not fatal).
    pub loop_errors: f64,
    pub problems: Vec<String>,
}

/// RSS growth allowed over a soak, KiB.
pub const RSS_GROWTH_KIB: i64 = 8 * 1024;
/// Open-fd growth allowed over a soak.
pub const FD_GROWTH: i64 = 2;

/// Reads the soak's lines out of `output` (the whole guest output).
pub fn check(output: &str, min_churned: i64) -> SoakReport {
    let mut r = SoakReport::default();
    let line = |p: &str| output.lines().rev().find_map(|l| l.strip_prefix(p));
    let key = |l: &str, k: &str| -> Option<i64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
    };
    let fields = |l: &str| -> Option<(i64, i64, i64)> {
        Some((key(l, "rss_kib")?, key(l, "fds")?, key(l, "series")?))
    };
    let (Some(base), Some(end)) = (
        line("BASE ").and_then(fields),
        line("END ").and_then(fields),
    ) else {
        r.problems
            .push("no BASE or END line: the soak did not finish".into());
        return r;
    };
    r.peak_rss_kib = line("END ").and_then(|l| key(l, "hwm_kib"));
    r.samples.push((0, base.0, base.1, base.2));
    for l in output.lines().filter_map(|l| l.strip_prefix("SOAK t=")) {
        let t = l.split_whitespace().next().and_then(|t| t.parse().ok());
        if let (Some(t), Some((rss, fds, series))) = (t, fields(l)) {
            r.samples.push((t, rss, fds, series));
        }
    }
    r.churned = line("CHURNED ")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(0, |n| n - 1000);
    let t_end = r.samples.last().map_or(0, |s| s.0) + 1;
    r.samples.push((t_end, end.0, end.1, end.2));
    r.loop_errors = line("LOOP_ERRORS ")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    let p = &mut r.problems;
    if r.churned < min_churned {
        p.push(format!(
            "only {} containers churned (at least {min_churned})",
            r.churned
        ));
    }
    if end.2 != 0 {
        p.push(format!(
            "{} series of churned cgroups left at the end",
            end.2
        ));
    }
    if end.0 - base.0 > RSS_GROWTH_KIB {
        p.push(format!(
            "RSS grew by {} KiB ({} → {} KiB)",
            end.0 - base.0,
            base.0,
            end.0
        ));
    }
    if (end.1 - base.1).abs() > FD_GROWTH {
        p.push(format!("open fds {} → {}", base.1, end.1));
    }
    if !output.lines().any(|l| l == "ALIVE") {
        p.push("tierd was not alive at the end".into());
    }
    if line("EXIT ") != Some("0") {
        p.push(format!("tierd exited {:?} on SIGTERM", line("EXIT ")));
    }
    if line("KDAMONDS ") != Some("0") {
        p.push(format!(
            "kdamonds left after the stop: {:?}",
            line("KDAMONDS ")
        ));
    }
    if output.contains("panicked") {
        p.push("tierd panicked".into());
    }
    r
}

/// The soak as a Markdown table (one row per sample).
pub fn table(r: &SoakReport) -> String {
    let mut t = String::from(
        "| t (s) | tierd RSS (KiB) | open fds | series of churned cgroups |\n|---|---|---|---|\n",
    );
    for (s, rss, fds, series) in &r.samples {
        t += &format!("| {s} | {rss} | {fds} | {series} |\n");
    }
    t += &format!(
        "\n{} containers churned; peak RSS {} KiB; loop errors counted: {}; {}\n",
        r.churned,
        r.peak_rss_kib
            .map_or("unknown".to_string(), |k| k.to_string()),
        r.loop_errors,
        if r.problems.is_empty() {
            "passed".to_string()
        } else {
            format!("FAILED: {}", r.problems.join("; "))
        }
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "\
BASE rss_kib=6800 fds=21 series=13
SOAK t=60 rss_kib=6900 fds=21 series=13
CHURNED 1040
END rss_kib=7000 hwm_kib=9000 fds=22 series=0
ALIVE
LOOP_ERRORS 0
EXIT 0
KDAMONDS 0
";

    #[test]
    fn a_flat_soak_passes() {
        let r = check(OK, 20);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.churned, 40);
        assert_eq!(r.peak_rss_kib, Some(9000));
        assert_eq!(
            r.samples,
            vec![(0, 6800, 21, 13), (60, 6900, 21, 13), (61, 7000, 22, 0)]
        );
        assert!(table(&r).contains("| 60 | 6900 | 21 | 13 |"));
    }

    #[test]
    fn each_breach_is_named() {
        let bad = OK
            .replace(
                "END rss_kib=7000 hwm_kib=9000 fds=22 series=0",
                "END rss_kib=16000 fds=30 series=2",
            )
            .replace("ALIVE\n", "")
            .replace("EXIT 0", "EXIT 137")
            .replace("KDAMONDS 0", "KDAMONDS 1");
        let r = check(&bad, 50);
        let all = r.problems.join("\n");
        for what in [
            "only 40",
            "2 series",
            "RSS grew by 9200",
            "open fds 21 → 30",
            "not alive",
            "exited",
            "kdamonds left",
        ] {
            assert!(all.contains(what), "{what} missing from {all}");
        }
        assert!(!check("", 1).problems.is_empty());
    }
}
