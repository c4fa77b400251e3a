//! `cargo xtask bench`: the evaluation harness. Runs scenario files with
//! `tierscen` in the emulated CXL host, every scenario under each mode
//! (kernel tiering only, then tierd variants) in one boot, collects the
//! time series the runner prints (`SAMPLE`/`HOST` JSON lines), and writes,
//! per scenario, `samples.jsonl`, a Markdown table and PNG plots of fast-tier
//! bytes and hot-set residency over time under `<out>/<scenario>/`, plus
//! `<out>/report.md` with every table.
//!
//! Scenario files may carry a `[sweep]` table (`var`, `values`): the runner
//! then makes one scenario per value, replacing `{var}` in the containers'
//! arguments (the knee test sweeps the hot share of a footprint this way).
//!
//! Fails (non-zero exit) when the guest fails, a scenario fails, or a
//! scenario/mode pair recorded no samples.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;

/// A scenario as the host needs it (the guest runs the file itself).
#[derive(Debug, Clone)]
pub struct ScenarioFile {
    pub name: String,
    /// TOML text as run (sweeps expanded).
    pub text: String,
    pub checkpoints_s: Vec<u64>,
    pub duration_s: u64,
    pub containers: Vec<ContainerInfo>,
    /// (sweep variable, value) when expanded from a sweep.
    pub sweep: Option<(String, i64)>,
    /// The scenario's own `modes = [..]`, overriding the command line's
    /// (overhead scenarios run under tierd only).
    pub modes: Option<Vec<String>>,
    /// Kernel modules the guest needs for it (`modules = [..]`, load order).
    pub modules: Vec<String>,
    /// `memory_kinds = true`: the report has a table of each container's
    /// anon / file bytes per tier, swap and memory pressure.
    pub memory_kinds: bool,
}

impl ScenarioFile {
    /// The modes this scenario runs under.
    pub fn modes(&self, default: &[String]) -> Vec<String> {
        self.modes.clone().unwrap_or_else(|| default.to_vec())
    }
}

#[derive(Debug, Clone)]
pub struct ContainerInfo {
    pub name: String,
    pub start_s: u64,
    pub args: Vec<String>,
    pub local_low_mib: Option<u64>,
}

/// DRAM of the guest the scenario files are sized for (node 0, MiB).
pub const REFERENCE_DRAM_MIB: u64 = 1024;

/// Workload arguments that are sizes in MiB (tierload) or counts of values
/// (redisload), scaled with the guest.
const SIZE_FLAGS: [&str; 4] = ["--size-mib", "--hot-mib", "--hot-offset-mib", "--keys"];

/// Scales every size in a scenario's TOML by `scale` (guest DRAM over
/// [`REFERENCE_DRAM_MIB`]): the values after [`SIZE_FLAGS`] in `args`,
/// `local_low_mib`, and `MiB` amounts in the tierd config (`"350MiB"`).
/// Sizes are written for the default 1 GiB + 1 GiB guest; a bigger guest gets
/// proportionally bigger containers, so the same pressure.
fn scale_sizes(t: &mut toml::Table, scale: f64) {
    if (scale - 1.0).abs() < 1e-9 {
        return;
    }
    let sc = |v: i64| ((v as f64) * scale).round().max(1.0) as i64;
    if let Some(cs) = t.get_mut("container").and_then(|c| c.as_array_mut()) {
        for c in cs.iter_mut().filter_map(|c| c.as_table_mut()) {
            if let Some(args) = c.get_mut("args").and_then(|a| a.as_array_mut()) {
                for i in 1..args.len() {
                    let flag = args[i - 1].as_str().unwrap_or_default();
                    if SIZE_FLAGS.contains(&flag) {
                        if let Some(n) = args[i].as_str().and_then(|x| x.parse::<i64>().ok()) {
                            args[i] = sc(n).to_string().into();
                        }
                    }
                }
            }
            if let Some(low) = c.get("local_low_mib").and_then(|x| x.as_integer()) {
                c.insert("local_low_mib".into(), sc(low).into());
            }
        }
    }
    if let Some(cfg) = t.get("tierd_config").and_then(|x| x.as_str()) {
        let mut out = String::new();
        let mut rest = cfg;
        while let Some(i) = rest.find("MiB\"") {
            let head = &rest[..i];
            let start = head
                .rfind(|ch: char| !ch.is_ascii_digit())
                .map_or(0, |j| j + 1);
            match head[start..].parse::<i64>() {
                Ok(n) => {
                    out.push_str(&head[..start]);
                    out.push_str(&sc(n).to_string());
                }
                Err(_) => out.push_str(head),
            }
            out.push_str("MiB\"");
            rest = &rest[i + 4..];
        }
        out.push_str(rest);
        t.insert("tierd_config".into(), out.into());
    }
}

/// Reads a scenario file; a `[sweep]` gives one scenario per value. Sizes
/// are scaled to a guest with `dram_mib` of DRAM (see [`scale_sizes`]).
pub fn load(path: &Path, dram_mib: u64) -> Result<Vec<ScenarioFile>> {
    let scale = dram_mib as f64 / REFERENCE_DRAM_MIB as f64;
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut v: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: invalid TOML", path.display()))?;
    let sweep = v.remove("sweep");
    let modes: Option<Vec<String>> = v.remove("modes").and_then(|m| {
        m.as_array().map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
    });
    if !v.contains_key("tierd_config") {
        bail!(
            "{}: no top-level tierd_config (keys after a [sweep] or [[event]] table belong to it: put tables last)",
            path.display()
        );
    }
    let base_name = v
        .get("name")
        .and_then(|n| n.as_str())
        .with_context(|| format!("{}: no name", path.display()))?
        .to_owned();
    let variants: Vec<(Option<(String, i64)>, toml::Table)> = match sweep {
        None => vec![(None, v)],
        Some(s) => {
            let var = s
                .get("var")
                .and_then(|x| x.as_str())
                .with_context(|| format!("{}: [sweep] needs var = \"NAME\"", path.display()))?
                .to_owned();
            let values = s
                .get("values")
                .and_then(|x| x.as_array())
                .with_context(|| format!("{}: [sweep] needs values = [..]", path.display()))?;
            let mut out = Vec::new();
            for val in values {
                let n = val.as_integer().with_context(|| {
                    format!("{}: sweep values must be integers", path.display())
                })?;
                let text = toml::to_string(&v)?.replace(&format!("{{{var}}}"), &n.to_string());
                let mut t: toml::Table = toml::from_str(&text)?;
                t.insert("name".into(), format!("{base_name}-{var}{n}").into());
                out.push((Some((var.clone(), n)), t));
            }
            out
        }
    };
    variants
        .into_iter()
        .map(|(sweep, mut t)| {
            scale_sizes(&mut t, scale);
            let name = t["name"].as_str().unwrap_or_default().to_owned();
            let ints = |k: &str| -> Vec<u64> {
                t.get(k)
                    .and_then(|x| x.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_integer())
                            .map(|x| x as u64)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let containers = t
                .get("container")
                .and_then(|c| c.as_array())
                .with_context(|| format!("{}: no [[container]]", path.display()))?
                .iter()
                .map(|c| ContainerInfo {
                    name: c.get("name").and_then(|x| x.as_str()).unwrap_or("?").into(),
                    start_s: c.get("start_s").and_then(|x| x.as_integer()).unwrap_or(0) as u64,
                    args: c
                        .get("args")
                        .and_then(|x| x.as_array())
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default(),
                    local_low_mib: c
                        .get("local_low_mib")
                        .and_then(|x| x.as_integer())
                        .map(|x| x as u64),
                })
                .collect();
            let strings = |k: &str| -> Vec<String> {
                t.get(k)
                    .and_then(|x| x.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            Ok(ScenarioFile {
                modules: strings("modules"),
                memory_kinds: t
                    .get("memory_kinds")
                    .and_then(|x| x.as_bool())
                    .unwrap_or(false),
                checkpoints_s: ints("checkpoints_s"),
                duration_s: t
                    .get("duration_s")
                    .and_then(|x| x.as_integer())
                    .unwrap_or(120) as u64,
                text: toml::to_string(&t)?,
                name,
                containers,
                sweep,
                modes: modes.clone(),
            })
        })
        .collect()
}

/// One scenario's series, as printed by `tierscen --emit`.
#[derive(Debug, Default, Clone)]
pub struct Series {
    /// By mode: per-container samples and host samples.
    pub samples: BTreeMap<String, Vec<Value>>,
    pub host: BTreeMap<String, Vec<Value>>,
    /// By mode: tierd's per-phase cycle profile (`PROFILE` line).
    pub profile: BTreeMap<String, Value>,
    /// By mode: the tierd metric samples the scenario asked for
    /// (`report_metrics`; `METRIC` lines), as /metrics prints them.
    pub metrics: BTreeMap<String, Vec<String>>,
}

/// Collects `SAMPLE` and `HOST` lines by scenario.
pub fn parse_output(out: &str) -> BTreeMap<String, Series> {
    let mut by: BTreeMap<String, Series> = BTreeMap::new();
    for l in out.lines() {
        let (tag, rest) = match l.split_once(' ') {
            Some(x) => x,
            None => continue,
        };
        if !["SAMPLE", "HOST", "PROFILE", "METRIC"].contains(&tag) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(rest) else {
            continue;
        };
        let sc = v["scenario"].as_str().unwrap_or_default().to_owned();
        let mode = v["mode"].as_str().unwrap_or_default().to_owned();
        let s = by.entry(sc).or_default();
        if tag == "PROFILE" {
            s.profile.insert(mode, v);
            continue;
        }
        if tag == "METRIC" {
            let line = v["sample"].as_str().unwrap_or_default().to_owned();
            s.metrics.entry(mode).or_default().push(line);
            continue;
        }
        let m = if tag == "SAMPLE" {
            &mut s.samples
        } else {
            &mut s.host
        };
        m.entry(mode).or_default().push(v);
    }
    by
}

/// The line the demo's guest script prints before each repeat of its
/// scenarios (`REPEAT <k>`), so that one output holds several runs of each.
pub const REPEAT_MARKER: &str = "REPEAT";

/// Splits an output into repeats at [`REPEAT_MARKER`] lines and parses each
/// with [`parse_output`]: per scenario, one [`Series`] per repeat that ran
/// it, in order. An output without markers (a `bench` run, an older demo
/// log) is one repeat.
pub fn parse_repeats(out: &str) -> BTreeMap<String, Vec<Series>> {
    let mut chunks = vec![String::new()];
    for l in out.lines() {
        if l.split_whitespace().next() == Some(REPEAT_MARKER) {
            chunks.push(String::new());
            continue;
        }
        let c = chunks.last_mut().expect("never empty");
        c.push_str(l);
        c.push('\n');
    }
    let mut by: BTreeMap<String, Vec<Series>> = BTreeMap::new();
    for c in chunks {
        for (name, s) in parse_output(&c) {
            by.entry(name).or_default().push(s);
        }
    }
    by
}

/// The keys of a `PROFILE` line that hold per-phase seconds: wall time,
/// and the CPU time of tierd's cycle thread (absent from an older tierd).
const PHASE_KEYS: [&str; 2] = ["phases", "cpu_phases"];

/// One series whose cycle profiles are the sums of `runs`' (cycles and
/// seconds per phase added per mode), for a profile table over repeats.
pub fn merged_profiles(runs: &[Series]) -> Series {
    let mut out = Series::default();
    for s in runs {
        for (mode, p) in &s.profile {
            let e = out
                .profile
                .entry(mode.clone())
                .or_insert_with(|| serde_json::json!({"cycles": 0.0, "phases": []}));
            e["cycles"] =
                (e["cycles"].as_f64().unwrap_or(0.0) + p["cycles"].as_f64().unwrap_or(0.0)).into();
            for key in PHASE_KEYS {
                let mut phases = e[key].as_array().cloned().unwrap_or_default();
                for x in p[key].as_array().into_iter().flatten() {
                    let (Some(name), Some(v)) = (x[0].as_str(), x[1].as_f64()) else {
                        continue;
                    };
                    match phases.iter_mut().find(|y| y[0].as_str() == Some(name)) {
                        Some(y) => y[1] = (y[1].as_f64().unwrap_or(0.0) + v).into(),
                        None => phases.push(serde_json::json!([name, v])),
                    }
                }
                e[key] = phases.into();
            }
        }
    }
    out
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(|x| x.as_f64())
}

const MIB: f64 = 1048576.0;

/// The Markdown tables of tierd's per-phase cycle profile: per scenario and
/// tierd mode, the mean wall time per cycle of each phase and in all, ms;
/// then the same for the CPU time of tierd's cycle thread, where the runs
/// measured it. Empty when no run printed a profile.
pub fn profile_table<'a>(runs: impl IntoIterator<Item = (&'a str, &'a Series)>) -> String {
    let runs: Vec<_> = runs.into_iter().collect();
    phase_table(
        &runs,
        "phases",
        "tierd's cycle, wall time per phase (ms per cycle, mean)",
    ) + &phase_table(
        &runs,
        "cpu_phases",
        "tierd's cycle, CPU time of its thread per phase (ms per cycle, mean; \
         the kernel work of its writes included)",
    )
}

/// One table of [`profile_table`]: the per-phase seconds under `key` of
/// each profile, in ms per cycle, headed by `title`; empty when no profile
/// has any.
fn phase_table(runs: &[(&str, &Series)], key: &str, title: &str) -> String {
    // Columns: the phases in the order tierscen prints them (tierd's
    // `CYCLE_PHASES`, the order of its cycle), first appearance first.
    let mut columns: Vec<String> = Vec::new();
    for (_, s) in runs {
        for p in s.profile.values() {
            for x in p[key].as_array().into_iter().flatten() {
                if let Some(ph) = x[0].as_str() {
                    if !columns.iter().any(|c| c == ph) {
                        columns.push(ph.to_owned());
                    }
                }
            }
        }
    }
    let mut t = String::new();
    for (name, s) in runs {
        for (mode, p) in &s.profile {
            let cycles = p["cycles"].as_f64().unwrap_or(0.0);
            let phases = p[key].as_array().cloned().unwrap_or_default();
            if cycles <= 0.0 || phases.is_empty() {
                continue;
            }
            let ms = |name: &str| {
                phases
                    .iter()
                    .find(|x| x[0].as_str() == Some(name))
                    .and_then(|x| x[1].as_f64())
                    .map_or(0.0, |v| 1e3 * v / cycles)
            };
            let _ = write!(t, "| {name} | {mode} | {cycles:.0} |");
            let mut total = 0.0;
            for ph in &columns {
                total += ms(ph);
                let _ = write!(t, " {:.2} |", ms(ph));
            }
            let _ = writeln!(t, " {total:.2} |");
        }
    }
    if t.is_empty() {
        return t;
    }
    let mut h = format!("\n{title}:\n\n| scenario | mode | cycles |");
    for ph in &columns {
        h += &format!(" {ph} |");
    }
    h += " total |\n|---|---|---|";
    h += &"---|".repeat(columns.len() + 1);
    h + "\n" + &t
}

/// The Markdown table of one scenario: one row per (mode, container) and
/// one per mode for host-wide figures.
pub fn table(sc: &ScenarioFile, s: &Series, modes: &[String]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "### {}\n", sc.name);
    let cps = &sc.checkpoints_s;
    let _ = write!(t, "| mode | container | local % at end |");
    for cp in cps {
        let _ = write!(t, " hot-set residency @{cp} s |");
    }
    let _ = writeln!(
        t,
        " hot set ≥ 95% on DRAM after | MiB × s below local_low | modelled latency (ns, model) |"
    );
    let _ = writeln!(t, "|{}", "---|".repeat(6 + cps.len()));
    for (mode, c, mine) in container_samples(sc, s, modes) {
        let last = mine[mine.len() - 1];
        let _ = write!(
            t,
            "| {mode} | {} | {:.1} |",
            c.name,
            100.0 * f(last, "local_ratio").unwrap_or(0.0)
        );
        for &cp in cps {
            let near = mine.iter().min_by(|a, b| {
                (f(a, "t_s").unwrap_or(0.0) - cp as f64)
                    .abs()
                    .total_cmp(&(f(b, "t_s").unwrap_or(0.0) - cp as f64).abs())
            });
            match near.and_then(|v| f(v, "hot_residency")) {
                Some(r) => {
                    let _ = write!(t, " {r:.3} |");
                }
                None => t.push_str(" – |"),
            }
        }
        match mine
            .iter()
            .find(|v| f(v, "hot_residency").is_some_and(|r| r >= 0.95))
        {
            Some(v) => {
                let _ = write!(
                    t,
                    " {:.0} s |",
                    f(v, "t_s").unwrap_or(0.0) - c.start_s as f64
                );
            }
            None => t.push_str(" never |"),
        }
        match c.local_low_mib {
            Some(low) => {
                let _ = write!(t, " {:.0} |", below_local_low(&mine, low));
            }
            None => t.push_str(" – |"),
        }
        match f(last, "model_latency_ns") {
            Some(l) if l > 0.0 => {
                let _ = writeln!(t, " {l:.0} |");
            }
            _ => t.push_str(" – |\n"),
        }
    }
    // Host-wide and spread.
    let _ = writeln!(
        t,
        "\n| mode | local-fraction spread, identical containers (pts) | DRAM used after last start (mean / min %) | pages migrated/s (run / 2nd half) | tierd CPU % of one core | tierd max RSS (MiB) |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|");
    let last_start = sc.containers.iter().map(|c| c.start_s).max().unwrap_or(0) as f64;
    for mode in modes {
        let (Some(samples), Some(host)) = (s.samples.get(mode), s.host.get(mode)) else {
            continue;
        };
        let spread = identical_spread(sc, samples)
            .map(|x| format!("{x:.1}"))
            .unwrap_or_else(|| "–".into());
        let after = dram_used_pct(host, last_start + 1.0);
        let used = match (mean(&after), min(&after)) {
            (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
            _ => "–".into(),
        };
        let (Some(first), Some(last)) = (host.first(), host.last()) else {
            continue;
        };
        let cpu = tierd_cpu_pct(host).unwrap_or(0.0);
        let rss = host
            .iter()
            .filter_map(|h| f(h, "tierd_rss_bytes"))
            .fold(0.0, f64::max)
            / MIB;
        let tierd = mode != "kernel";
        let _ = writeln!(
            t,
            "| {mode} | {spread} | {used} | {:.0} / {:.0} | {} | {} |",
            migrated_per_s(first, last),
            migrated_per_s_2nd_half(host).unwrap_or(0.0),
            if tierd {
                format!("{cpu:.2}")
            } else {
                "–".into()
            },
            if tierd {
                format!("{rss:.1}")
            } else {
                "–".into()
            },
        );
    }
    if sc.memory_kinds {
        t += &kinds_table(sc, s, modes);
    }
    for (mode, lines) in &s.metrics {
        let _ = writeln!(t, "\ntierd metrics at the end of {mode}:\n\n```");
        for l in lines {
            let _ = writeln!(t, "{l}");
        }
        t += "```\n";
    }
    t
}

/// Each mode's samples of each container that has any, in mode then
/// container order.
fn container_samples<'a>(
    sc: &'a ScenarioFile,
    s: &'a Series,
    modes: &'a [String],
) -> impl Iterator<Item = (&'a str, &'a ContainerInfo, Vec<&'a Value>)> {
    modes.iter().flat_map(move |mode| {
        let samples = s.samples.get(mode);
        sc.containers.iter().filter_map(move |c| {
            let mine: Vec<&Value> = samples?
                .iter()
                .filter(|v| v["container"] == c.name.as_str())
                .collect();
            (!mine.is_empty()).then_some((mode.as_str(), c, mine))
        })
    })
}

/// Per mode and container: anon and file MiB on the fast / lower tier at
/// the last sample, swap, memory.pressure's largest `some avg10`, and the
/// workload's hit ratio and throughput at the end.
fn kinds_table(sc: &ScenarioFile, s: &Series, modes: &[String]) -> String {
    let mut t = String::from(
        "\n| mode | container | anon fast / lower (MiB) | file fast / lower (MiB) | swap (MiB) | memory.pressure some avg10, max (%) | hit ratio | M accesses/s |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (mode, c, mine) in container_samples(sc, s, modes) {
        let last = mine[mine.len() - 1];
        let g = |k: &str| f(last, k).unwrap_or(0.0) / MIB;
        let psi = mine
            .iter()
            .filter_map(|v| f(v, "pressure_some_avg10"))
            .fold(0.0, f64::max);
        let opt = |k: &str, scale: f64, digits: usize| {
            f(last, k)
                .map(|x| format!("{:.*}", digits, x / scale))
                .unwrap_or_else(|| "–".into())
        };
        let _ = writeln!(
            t,
            "| {mode} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | {psi:.2} | {} | {} |",
            c.name,
            g("fast_bytes") - g("file_fast_bytes"),
            g("lower_bytes") - g("file_lower_bytes"),
            g("file_fast_bytes"),
            g("file_lower_bytes"),
            g("swap_bytes"),
            opt("hit_ratio", 1.0, 3),
            opt("accesses_per_s", 1e6, 3),
        );
    }
    t
}

/// DRAM used, % of the fast tier, of every host sample from `from_s` on.
fn dram_used_pct(host: &[Value], from_s: f64) -> Vec<f64> {
    host.iter()
        .filter(|h| f(h, "t_s").unwrap_or(0.0) >= from_s)
        .map(|h| {
            100.0 * f(h, "fast_used_bytes").unwrap_or(0.0) / f(h, "fast_total_bytes").unwrap_or(1.0)
        })
        .collect()
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn min(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().cloned().fold(f64::INFINITY, f64::min))
}

/// Pages migrated per second (host `pgmigrate_success`) between samples.
fn migrated_per_s(a: &Value, b: &Value) -> f64 {
    (f(b, "pgmigrate_success").unwrap_or(0.0) - f(a, "pgmigrate_success").unwrap_or(0.0))
        / (f(b, "t_s").unwrap_or(0.0) - f(a, "t_s").unwrap_or(0.0)).max(1e-3)
}

/// Pages migrated per second over the second half of a mode's run.
fn migrated_per_s_2nd_half(host: &[Value]) -> Option<f64> {
    rate_2nd_half(host, "pgmigrate_success")
}

/// A cumulative host counter's rate over the second half of a mode's run,
/// per second; `None` for samples without it (older tierscen output).
fn rate_2nd_half(host: &[Value], key: &str) -> Option<f64> {
    let (mid, last) = (host.get(host.len() / 2)?, host.last()?);
    Some((f(last, key)? - f(mid, key)?) / (f(last, "t_s")? - f(mid, "t_s")?).max(1e-3))
}

/// tierd's CPU over a mode's run, % of one core.
fn tierd_cpu_pct(host: &[Value]) -> Option<f64> {
    let (first, last) = (host.first()?, host.last()?);
    Some(
        100.0 * (f(last, "tierd_cpu_s")? - f(first, "tierd_cpu_s")?)
            / (f(last, "t_s")? - f(first, "t_s")?).max(1e-3),
    )
}

/// CPU seconds a mode's run spent under `keys` of its host samples
/// (cumulative seconds), as % of one core. `None` for samples without one
/// of the keys.
fn cpu_pct(host: &[Value], keys: &[&str]) -> Option<f64> {
    let (first, last) = (host.first()?, host.last()?);
    Some(100.0 * cpu_s(host, keys)? / (f(last, "t_s")? - f(first, "t_s")?).max(1e-3))
}

/// CPU seconds a mode's run spent under `keys` (see [`cpu_pct`]).
fn cpu_s(host: &[Value], keys: &[&str]) -> Option<f64> {
    let (first, last) = (host.first()?, host.last()?);
    let mut s = 0.0;
    for &k in keys {
        s += f(last, k)? - f(first, k)?;
    }
    Some(s)
}

/// The CPU of tiering, wherever it runs ([`tiering_cpu_pct`]).
const TIERING_CPU: [&str; 3] = [
    "tierd_cpu_s",
    "kernel_tiering_cpu_s",
    "kernel_promotion_cpu_s",
];

/// CPU spent on tiering over a mode's run, % of one core: tierd's own, the
/// kernel's tiering threads (kswapd, kdamond) and the kernel's promotions
/// in the faulting tasks (time in `migrate_misplaced_folio`, which tierscen
/// times with its own copy of the hint-fault probe in every mode). Every
/// migration counts wherever it runs: kswapd's demotions and tierd's
/// `memory.reclaim`, the kernel's promotions and tierd's `move_pages`.
fn tiering_cpu_pct(host: &[Value]) -> Option<f64> {
    cpu_pct(host, &TIERING_CPU)
}

/// Pages migrated over a mode's run (host `pgmigrate_success`: promotions,
/// demotions and tierd's `move_pages`), thousands.
fn pages_migrated_k(host: &[Value]) -> Option<f64> {
    let (first, last) = (host.first()?, host.last()?);
    Some((f(last, "pgmigrate_success")? - f(first, "pgmigrate_success")?) / 1e3)
}

/// The tiering CPU of [`tiering_cpu_pct`] per page migrated over a mode's
/// run, µs: what a move costs wherever it runs, tierd's fixed cost per
/// cycle included. `None` under 1,000 pages, where the fixed cost is all
/// the row would show.
fn tiering_cpu_per_page_us(host: &[Value]) -> Option<f64> {
    let pages = pages_migrated_k(host)? * 1e3;
    let s = cpu_s(host, &TIERING_CPU)?;
    (pages >= 1e3).then(|| 1e6 * s / pages)
}

/// The kernel's promotions in the faulting tasks, % of one core (part of
/// [`tiering_cpu_pct`]).
fn kernel_promotion_pct(host: &[Value]) -> Option<f64> {
    cpu_pct(host, &["kernel_promotion_cpu_s"])
}

/// tierd, kswapd and kdamond plus all of the workloads' system time:
/// kernel tiering scans (`task_numa_work`), takes hint faults and promotes
/// in the tasks' own context; the workloads' other kernel time (page
/// faults, system calls) is in both modes alike. `None` for samples
/// without it.
fn tiering_cpu_with_tasks_pct(host: &[Value]) -> Option<f64> {
    cpu_pct(
        host,
        &[
            "tierd_cpu_s",
            "kernel_tiering_cpu_s",
            "workload_system_cpu_s",
        ],
    )
}

/// Which way a verdict metric is better; `Neither` for a row shown to
/// read the others by (a tenant's CPU), never compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
    Neither,
}

/// One row of the verdict: a metric's value per mode (None: not measured).
struct VerdictRow {
    metric: String,
    better: Better,
    /// Relative tolerance within which two values count as equal.
    tolerance: f64,
    /// The container a per-container row is about (None: host-wide).
    container: Option<String>,
    values: Vec<Option<f64>>,
    /// Decimal places printed.
    digits: usize,
}

/// Mean of `key` over a container's samples from `from_s` on.
fn mean_from(mine: &[&Value], key: &str, from_s: f64) -> Option<f64> {
    let v: Vec<f64> = mine
        .iter()
        .filter(|v| f(v, "t_s").unwrap_or(0.0) >= from_s)
        .filter_map(|v| f(v, key))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// How fast cumulative seconds `key` grew over a container's samples from
/// `from_s` on, % of wall time (CPU time: % of one core). `None` with fewer
/// than two such samples or without the key.
fn rate_pct(mine: &[&Value], key: &str, from_s: f64) -> Option<f64> {
    let w: Vec<&&Value> = mine
        .iter()
        .filter(|v| f(v, "t_s").unwrap_or(0.0) >= from_s)
        .collect();
    let (a, b) = (w.first()?, w.last()?);
    let dt = f(b, "t_s")? - f(a, "t_s")?;
    (dt > 0.0).then_some(100.0 * (f(b, key)? - f(a, key)?) / dt)
}

/// The verdict rows of one scenario (issue 11 "Default = best"): per
/// container its hit ratio and hottest-10% residency (mean of the last
/// quarter of the run), its own throughput (accesses/s, mean of the second
/// half), time to 95% of its hot set on DRAM for late arrivals, MiB × s
/// below `local_low`; host-wide the identical-tenant spread, DRAM used
/// (mean and min from 20 s after the last arrival), pages migrated/s in the
/// second half, tierd's CPU and the tiering CPU, and, never compared,
/// the pages migrated in all and the tiering CPU per page.
fn verdict_rows(sc: &ScenarioFile, s: &Series, modes: &[String]) -> Vec<VerdictRow> {
    let mut rows = Vec::new();
    let end = sc.duration_s as f64;
    let mut row = |metric: String, better, tolerance, digits, values| {
        // Per-container rows are named "<container>: <metric>".
        let container = sc
            .containers
            .iter()
            .find(|c| metric.starts_with(&format!("{}: ", c.name)))
            .map(|c| c.name.clone());
        rows.push(VerdictRow {
            metric,
            better,
            tolerance,
            container,
            values,
            digits,
        })
    };
    let per = |mode: &str, name: &str| -> Vec<&Value> {
        s.samples
            .get(mode)
            .map(|v| v.iter().filter(|x| x["container"] == name).collect())
            .unwrap_or_default()
    };
    for c in &sc.containers {
        let from_end = |mine: &[&Value]| {
            let last = mine.last().and_then(|v| f(v, "t_s")).unwrap_or(end);
            last - 0.25 * (last - c.start_s as f64)
        };
        // The throughput rows' window: the second half of the container's run.
        let second_half = c.start_s as f64 + 0.5 * (end - c.start_s as f64);
        let vals = |key: &str, quarter: bool| -> Vec<Option<f64>> {
            modes
                .iter()
                .map(|m| {
                    let mine = per(m, &c.name);
                    let from = if quarter {
                        from_end(&mine)
                    } else {
                        second_half
                    };
                    mean_from(&mine, key, from)
                })
                .collect()
        };
        row(
            format!("{}: hit ratio", c.name),
            Better::Higher,
            0.01,
            3,
            vals("hit_ratio", true),
        );
        row(
            format!("{}: hottest 10% on DRAM", c.name),
            Better::Higher,
            0.01,
            3,
            vals("top10_residency", true),
        );
        row(
            format!("{}: throughput (M accesses/s)", c.name),
            Better::Higher,
            0.03,
            // Three places: on the CXL device a tenant runs at tens of
            // thousands of accesses a second.
            3,
            vals("accesses_per_s", false)
                .into_iter()
                .map(|v| v.map(|x| x / 1e6))
                .collect(),
        );
        // The CPU the tenant got and waited for over the throughput row's
        // window: under emulation its throughput follows its CPU.
        let cpu: Vec<Option<f64>> = modes
            .iter()
            .map(|m| rate_pct(&per(m, &c.name), "cpu_s", second_half))
            .collect();
        if cpu.iter().any(Option::is_some) {
            let thr = vals("accesses_per_s", false);
            let wait = modes
                .iter()
                .map(|m| rate_pct(&per(m, &c.name), "cpu_wait_s", second_half))
                .collect();
            row(
                format!("{}: CPU it got (% of one core)", c.name),
                Better::Neither,
                0.0,
                1,
                cpu.clone(),
            );
            row(
                format!("{}: waiting for a CPU (% of the time)", c.name),
                Better::Neither,
                0.0,
                1,
                wait,
            );
            row(
                format!("{}: M accesses per CPU-second", c.name),
                Better::Neither,
                0.0,
                3,
                thr.iter()
                    .zip(&cpu)
                    .map(|(t, c)| match (t, c) {
                        (Some(t), Some(c)) if *c > 0.0 => Some(t / 1e6 / (c / 100.0)),
                        _ => None,
                    })
                    .collect(),
            );
        }
        if c.start_s > 0 {
            let t95 = modes
                .iter()
                .map(|m| {
                    let mine = per(m, &c.name);
                    if mine.iter().all(|v| f(v, "hot_residency").is_none()) {
                        return None;
                    }
                    Some(
                        mine.iter()
                            .find(|v| f(v, "hot_residency").is_some_and(|r| r >= 0.95))
                            .map_or(f64::INFINITY, |v| {
                                f(v, "t_s").unwrap_or(0.0) - c.start_s as f64
                            }),
                    )
                })
                .collect();
            row(
                format!("{}: hot set ≥ 95% on DRAM after (s)", c.name),
                Better::Lower,
                0.0,
                0,
                t95,
            );
        }
        if let Some(low) = c.local_low_mib {
            let v = modes
                .iter()
                .map(|m| Some(below_local_low(&per(m, &c.name), low)))
                .collect();
            row(
                format!("{}: MiB × s below local_low", c.name),
                Better::Lower,
                0.1,
                0,
                v,
            );
        }
    }
    if sc.containers.len() > 1 {
        let v = modes
            .iter()
            .map(|m| identical_spread(sc, s.samples.get(m).map_or(&[][..], |v| v)))
            .collect::<Vec<_>>();
        if v.iter().any(Option::is_some) {
            row(
                "local-fraction spread, identical tenants (pts)".into(),
                Better::Lower,
                0.0,
                1,
                v,
            );
        }
    }
    let host = |m: &str| s.host.get(m).map_or(&[][..], |v| v.as_slice());
    let last_start = sc.containers.iter().map(|c| c.start_s).max().unwrap_or(0) as f64;
    let used: Vec<Vec<f64>> = modes
        .iter()
        .map(|m| dram_used_pct(host(m), last_start + 20.0))
        .collect();
    let per_mode = |g: &dyn Fn(&str) -> Option<f64>| modes.iter().map(|m| g(m)).collect();
    row(
        "DRAM used, mean (%)".into(),
        Better::Higher,
        0.01,
        1,
        used.iter().map(|u| mean(u)).collect(),
    );
    row(
        "DRAM used, min (%)".into(),
        Better::Higher,
        0.01,
        1,
        used.iter().map(|u| min(u)).collect(),
    );
    row(
        "pages migrated/s, 2nd half".into(),
        Better::Lower,
        0.1,
        0,
        per_mode(&|m| migrated_per_s_2nd_half(host(m))),
    );
    // Never compared: what another process's page moves cost a tenant
    // under emulation (each shootdown flushes a vCPU's software TLB).
    row(
        "TLB shootdowns/s, 2nd half".into(),
        Better::Neither,
        0.0,
        0,
        per_mode(&|m| rate_2nd_half(host(m), "tlb_shootdowns")),
    );
    row(
        "tierd CPU (% of one core, TCG)".into(),
        Better::Lower,
        0.0,
        1,
        per_mode(&|m| (m != "kernel").then(|| tierd_cpu_pct(host(m))).flatten()),
    );
    row(
        "kernel promotions in the tasks (% of one core)".into(),
        Better::Lower,
        0.1,
        1,
        per_mode(&|m| kernel_promotion_pct(host(m))),
    );
    row(
        "tiering CPU: tierd + kswapd + kdamond + kernel promotions (% of one core)".into(),
        Better::Lower,
        0.1,
        1,
        per_mode(&|m| tiering_cpu_pct(host(m))),
    );
    // The kdamonds' CPU, shown where one ran, never compared: DAMON's
    // share of the tiering CPU where a tierd config ran a kdamond; and
    // DAMON_STAT's (7.x), in no tiering row: it runs from boot in every
    // mode, tiers nothing, and its cost follows the boot's history (the
    // boot's first run keeps a tenth of the DAMON regions of any later run
    // whichever mode it is; docs/NOTES.md "Session 74").
    for (metric, key) in [
        ("of which kdamond (% of one core)", "kdamond_cpu_s"),
        (
            "DAMON_STAT's kdamond, the kernel's own monitor in every mode (% of one core)",
            "damon_stat_cpu_s",
        ),
    ] {
        let values: Vec<Option<f64>> = per_mode(&|m| cpu_pct(host(m), &[key]));
        if values.iter().flatten().any(|&v| v > 0.0) {
            row(metric.into(), Better::Neither, 0.0, 1, values);
        }
    }
    // What the tiering CPU buys: the pages moved (a better split can take
    // more), and what each cost. Shown, never compared.
    row(
        "pages migrated in all (thousands)".into(),
        Better::Neither,
        0.0,
        1,
        per_mode(&|m| pages_migrated_k(host(m))),
    );
    row(
        "tiering CPU per page migrated (µs)".into(),
        Better::Neither,
        0.0,
        0,
        per_mode(&|m| tiering_cpu_per_page_us(host(m))),
    );
    row(
        "tiering CPU with the workloads' kernel time (% of one core)".into(),
        Better::Lower,
        0.1,
        1,
        per_mode(&|m| tiering_cpu_with_tasks_pct(host(m))),
    );
    rows
}

/// The header of a verdict table: a column per mode and, per tierd mode,
/// its comparison with kernel tiering.
pub fn verdict_header(modes: &[String]) -> String {
    let mut t = String::from("| scenario | metric |");
    let mut cols = 2 + modes.len();
    for m in modes {
        let _ = write!(t, " {m} |");
    }
    if modes.iter().any(|m| m == "kernel") {
        for m in modes.iter().filter(|m| *m != "kernel") {
            let _ = write!(t, " {m} vs kernel |");
            cols += 1;
        }
    }
    let _ = writeln!(t, "\n|{}", "---|".repeat(cols));
    t
}

/// The verdict rows of one scenario (under [`verdict_header`]) from one or
/// more runs of it (`runs`: the same scenario repeated in one boot): a row
/// per metric, a column per mode with the median over the runs (and the
/// range, `min–max`, when there are several), and per tierd mode whether it
/// is ahead of or equal to kernel tiering. Medians are compared: `=` when
/// they differ by no more than the metric's tolerance, or by no more than
/// kernel tiering's own run-to-run spread in these runs (half its range: two
/// kernel-only runs differ by that much without any change), `ahead`,
/// `policy` — behind on a container that kernel tiering gave more than its
/// fair share in most runs, see [`above_share`] — or `BEHIND`. Returns the
/// rows and the metrics on which a tierd mode is behind (`policy` rows are
/// not).
pub fn verdict(sc: &ScenarioFile, runs: &[&Series], modes: &[String]) -> (String, Vec<String>) {
    let empty = Series::default();
    let runs: Vec<&Series> = if runs.is_empty() {
        vec![&empty]
    } else {
        runs.to_vec()
    };
    let per_run: Vec<Vec<VerdictRow>> = runs.iter().map(|s| verdict_rows(sc, s, modes)).collect();
    let kernel = modes.iter().position(|m| m == "kernel");
    let tierd_modes: Vec<usize> = (0..modes.len()).filter(|&i| Some(i) != kernel).collect();
    let mut t = String::new();
    let mut behind = Vec::new();
    for (n, r) in metric_order(&per_run).into_iter().enumerate() {
        let _ = write!(
            t,
            "| {} | {} |",
            if n == 0 { sc.name.as_str() } else { "" },
            r.metric
        );
        // Per mode: this metric's value in every run that measured it.
        let values: Vec<Vec<f64>> = (0..modes.len())
            .map(|i| {
                per_run
                    .iter()
                    .filter_map(|rows| rows.iter().find(|x| x.metric == r.metric)?.values[i])
                    .collect()
            })
            .collect();
        let medians: Vec<Option<f64>> = values.iter().map(|v| median(v)).collect();
        let show = |x: f64| {
            if x.is_infinite() {
                "never".to_string()
            } else {
                format!("{:.*}", r.digits, x)
            }
        };
        for (v, m) in values.iter().zip(&medians) {
            match m {
                Some(x) if v.len() > 1 => {
                    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let _ = write!(t, " {} ({}–{}) |", show(*x), show(lo), show(hi));
                }
                Some(x) => {
                    let _ = write!(t, " {} |", show(*x));
                }
                None => t.push_str(" – |"),
            }
        }
        if let Some(k) = kernel {
            let noise = half_range(&values[k]);
            for &i in &tierd_modes {
                let cmp = match (medians[k], medians[i]) {
                    _ if r.better == Better::Neither => "–",
                    (Some(kv), Some(tv)) => {
                        // Relative tolerance, and never finer than one
                        // unit of the displayed precision (0 vs 1 page/s).
                        let slack = (r.tolerance * kv.abs().max(tv.abs()))
                            .max(10f64.powi(-(r.digits as i32)))
                            .max(noise);
                        let ahead = match r.better {
                            Better::Higher => tv - kv,
                            Better::Lower => kv - tv,
                            // Never compared: answered "–" above.
                            Better::Neither => 0.0,
                        };
                        // Decided by the runs that measured both modes.
                        let policy = || {
                            r.container.as_deref().is_some_and(|c| {
                                let end = sc.duration_s as f64;
                                let seen: Vec<bool> = runs
                                    .iter()
                                    .filter_map(|s| above_share(s, c, &modes[k], &modes[i], end))
                                    .collect();
                                2 * seen.iter().filter(|&&a| a).count() > seen.len()
                            })
                        };
                        if kv == tv || (kv.is_finite() && tv.is_finite() && ahead.abs() <= slack) {
                            "="
                        } else if ahead > 0.0 {
                            "ahead"
                        } else if policy() {
                            "policy"
                        } else {
                            behind.push(format!("{} / {}: {}", sc.name, modes[i], r.metric));
                            "BEHIND"
                        }
                    }
                    _ => "–",
                };
                let _ = write!(t, " {cmp} |");
            }
        }
        t.push('\n');
    }
    (t, behind)
}

/// The verdict's rows over all runs, each metric once, in the order the
/// runs show them. A run shows some rows only where they were measured (a
/// kdamond's CPU where one ran), so a row's position differs from run to
/// run: values are matched by metric, never by position. A row only a
/// later run has goes after the row it follows there.
fn metric_order(per_run: &[Vec<VerdictRow>]) -> Vec<&VerdictRow> {
    let mut order: Vec<&VerdictRow> = Vec::new();
    for rows in per_run {
        let mut at = 0;
        for r in rows {
            match order.iter().position(|o| o.metric == r.metric) {
                Some(p) => at = p + 1,
                None => {
                    order.insert(at, r);
                    at += 1;
                }
            }
        }
    }
    order
}

/// Median of `v` (the mean of the middle two for an even count); `None`
/// when empty. Infinite values ("never") sort last.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some(0.5 * (v[n / 2 - 1] + v[n / 2])),
    }
}

/// Half the range of the finite values of `v`: the run-to-run spread of a
/// metric (0 for fewer than two finite values).
fn half_range(v: &[f64]) -> f64 {
    let finite: Vec<f64> = v.iter().cloned().filter(|x| x.is_finite()).collect();
    if finite.len() < 2 {
        return 0.0;
    }
    let lo = finite.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    0.5 * (hi - lo)
}

/// Whether kernel tiering gave a container more than its share: its mean
/// fast-tier bytes over the last quarter of the run under `kernel` exceed
/// its mean target under `tierd` over the same span by more than 5%. A
/// tierd mode behind on such a container's own metrics is behind because
/// the policy (weights, guarantees of others) says so, not by failing it.
/// `None` when the run lacks either mode's samples.
fn above_share(s: &Series, container: &str, kernel: &str, tierd: &str, end: f64) -> Option<bool> {
    let last_quarter = |mode: &str, key: &str| {
        let mine: Vec<&Value> = s
            .samples
            .get(mode)
            .map(|v| v.iter().filter(|x| x["container"] == container).collect())
            .unwrap_or_default();
        let last = mine.last().and_then(|v| f(v, "t_s")).unwrap_or(end);
        mean_from(&mine, key, 0.75 * last)
    };
    Some(last_quarter(kernel, "fast_bytes")? > 1.05 * last_quarter(tierd, "target_bytes")?)
}

/// MiB × s a container's fast-tier bytes spent below its `local_low`, from
/// the first sample at which its usage had grown to the guarantee (its
/// allocation ramp is not a violation); a container that never uses that
/// much is measured against its largest usage. Each sample stands for the
/// interval up to the next.
pub fn below_local_low(mine: &[&Value], low_mib: u64) -> f64 {
    let usage =
        |v: &Value| (f(v, "fast_bytes").unwrap_or(0.0) + f(v, "lower_bytes").unwrap_or(0.0)) / MIB;
    let max_usage = mine.iter().map(|v| usage(v)).fold(0.0, f64::max);
    let low = (low_mib as f64).min(max_usage);
    let Some(start) = mine.iter().position(|v| usage(v) >= low) else {
        return 0.0;
    };
    let mut below = 0.0;
    for w in mine[start..].windows(2) {
        let fast = f(w[0], "fast_bytes").unwrap_or(0.0) / MIB;
        let dt = f(w[1], "t_s").unwrap_or(0.0) - f(w[0], "t_s").unwrap_or(0.0);
        below += (low - fast).max(0.0) * dt;
    }
    below
}

/// Max − min of the final local fraction (percentage points) over containers
/// with the same workload arguments; None when no two are identical.
fn identical_spread(sc: &ScenarioFile, samples: &[Value]) -> Option<f64> {
    let mut groups: BTreeMap<Vec<String>, Vec<&str>> = BTreeMap::new();
    for c in &sc.containers {
        // Seeds and ports differ between otherwise identical tenants.
        let ignored = |a: &str| a == "--seed" || a == "--port";
        let key: Vec<String> = c
            .args
            .iter()
            .enumerate()
            .filter(|(i, a)| !ignored(a) && (*i == 0 || !ignored(&c.args[i - 1])))
            .map(|(_, a)| a.clone())
            .collect();
        groups.entry(key).or_default().push(&c.name);
    }
    let group = groups.values().find(|g| g.len() >= 2)?;
    let finals: Vec<f64> = group
        .iter()
        .filter_map(|name| {
            samples
                .iter()
                .rev()
                .find(|v| v["container"] == *name)
                .and_then(|v| f(v, "local_ratio"))
        })
        .collect();
    if finals.len() < 2 {
        return None;
    }
    let max = finals.iter().cloned().fold(f64::MIN, f64::max);
    let min = finals.iter().cloned().fold(f64::MAX, f64::min);
    Some(100.0 * (max - min))
}

/// Registers DejaVu Sans (fonts-dejavu-core) as plotters' sans-serif font.
pub fn register_font() -> Result<()> {
    let p = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
    let bytes = std::fs::read(p)
        .with_context(|| format!("{p}: plots need fonts-dejavu-core (`cargo xtask setup`)"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{p}: not a font plotters can read"))?;
    Ok(())
}

/// One PNG: `key` of every (mode, container) series over time.
pub fn plot(
    path: &Path,
    title: &str,
    y_label: &str,
    s: &Series,
    modes: &[String],
    key: &str,
    scale: f64,
) -> Result<bool> {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for mode in modes {
        let Some(samples) = s.samples.get(mode) else {
            continue;
        };
        let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for v in samples {
            if let (Some(t), Some(y)) = (f(v, "t_s"), f(v, key)) {
                by.entry(v["container"].as_str().unwrap_or("?").into())
                    .or_default()
                    .push((t, y * scale));
            }
        }
        for (c, pts) in by {
            lines.push((format!("{mode}: {c}"), pts));
        }
    }
    if lines.iter().all(|(_, p)| p.is_empty()) {
        return Ok(false);
    }
    let x_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.08;
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_label)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for (i, (name, pts)) in lines.into_iter().enumerate() {
        let color = Palette99::pick(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts, color))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 18, y)],
                    Palette99::pick(i).stroke_width(2),
                )
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(true)
}

/// Writes every artefact; returns the report text and the list of problems
/// (scenario/mode pairs without samples).
pub fn write_all(
    out_dir: &Path,
    scenarios: &[ScenarioFile],
    series: &BTreeMap<String, Series>,
    modes: &[String],
    command: &str,
) -> Result<(String, Vec<String>)> {
    std::fs::create_dir_all(out_dir).with_context(|| out_dir.display().to_string())?;
    let plots = register_font()
        .map_err(|e| eprintln!("xtask: {e:#}; no plots"))
        .is_ok();
    let mut problems = Vec::new();
    let mut report = format!("# tierd evaluation\n\nCommand: `{command}`\n\n");
    let mut knee: BTreeMap<(String, i64), (String, f64, f64)> = BTreeMap::new();
    for sc in scenarios {
        let empty = Series::default();
        let s = series.get(&sc.name).unwrap_or(&empty);
        let modes = &sc.modes(modes);
        for m in modes {
            if s.samples.get(m).is_none_or(|v| v.is_empty()) {
                problems.push(format!("{} / {m}: no container samples", sc.name));
            }
            if s.host.get(m).is_none_or(|v| v.is_empty()) {
                problems.push(format!("{} / {m}: no host samples", sc.name));
            }
        }
        let dir = out_dir.join(&sc.name);
        std::fs::create_dir_all(&dir)?;
        let mut jsonl = String::new();
        for v in s
            .samples
            .values()
            .flatten()
            .chain(s.host.values().flatten())
        {
            jsonl += &v.to_string();
            jsonl.push('\n');
        }
        std::fs::write(dir.join("samples.jsonl"), jsonl)?;
        std::fs::write(dir.join("scenario.toml"), &sc.text)?;
        let mut tbl = table(sc, s, modes);
        let (v, _) = verdict(sc, &[s], modes);
        tbl += "\nVerdict (kernel tiering vs tierd, same boot):\n\n";
        tbl += &verdict_header(modes);
        tbl += &v;
        tbl += &profile_table([(sc.name.as_str(), s)]);
        std::fs::write(dir.join("table.md"), &tbl)?;
        report += &tbl;
        if plots {
            for (file, title, y, key, scale) in [
                (
                    "fast-bytes.png",
                    "fast-tier (DRAM) bytes per container",
                    "MiB on the fast tier",
                    "fast_bytes",
                    1.0 / MIB,
                ),
                (
                    "residency.png",
                    "hot-set residency on the fast tier",
                    "share of the hot set on DRAM",
                    "hot_residency",
                    1.0,
                ),
            ] {
                let p = dir.join(file);
                if plot(
                    &p,
                    &format!("{}: {title}", sc.name),
                    y,
                    s,
                    modes,
                    key,
                    scale,
                )? {
                    let _ = writeln!(report, "\n![{}]({}/{file})", title, sc.name);
                }
            }
        }
        report.push('\n');
        if let Some((var, val)) = &sc.sweep {
            for m in modes {
                if let Some(last) = s.samples.get(m).and_then(|v| v.last()) {
                    knee.insert(
                        (m.clone(), *val),
                        (
                            var.clone(),
                            f(last, "hot_residency").unwrap_or(f64::NAN),
                            f(last, "model_latency_ns").unwrap_or(f64::NAN),
                        ),
                    );
                }
            }
        }
    }
    if !knee.is_empty() {
        report += "## Sweep summary (final sample)\n\n| mode | value | hot-set residency | modelled latency (ns, model) |\n|---|---|---|---|\n";
        for ((m, val), (var, res, lat)) in &knee {
            let _ = writeln!(report, "| {m} | {var} = {val} | {res:.3} | {lat:.0} |");
        }
    }
    std::fs::write(out_dir.join("report.md"), &report)?;
    Ok((report, problems))
}

/// The guest script: every scenario under `modes`, with a marker on failure.
pub fn script(
    scenarios: &[(ScenarioFile, String)],
    modes: &[String],
    duration_s: Option<u64>,
) -> String {
    // Debian's redis-server is redis-check-rdb under another name (it picks
    // its role from argv[0]).
    let mut s = String::from(
        "FAILED=0\n[ -x /usr/local/bin/redis-check-rdb ] && ln -sf redis-check-rdb /usr/local/bin/redis-server\n",
    );
    for (sc, guest) in scenarios {
        let mut cmd = format!(
            "tierscen {guest} --emit --modes {}",
            sc.modes(modes).join(",")
        );
        if let Some(d) = duration_s {
            cmd += &format!(" --duration-s {d}");
        }
        let _ = writeln!(
            s,
            "{cmd} || {{ echo \"SCENARIO_FAILED {}\"; FAILED=1; }}",
            sc.name
        );
    }
    s += "exit $FAILED\n";
    s
}

/// Checks the output for failed scenarios.
pub fn failures(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("SCENARIO_FAILED "))
        .map(String::from)
        .collect()
}

/// Default output directory: `<target>/tierd-bench`.
pub fn default_out(target: &Path) -> PathBuf {
    target.join("tierd-bench")
}

/// Errors out when anything is missing.
pub fn check(problems: &[String], failed: &[String]) -> Result<()> {
    if !failed.is_empty() || !problems.is_empty() {
        bail!(
            "evaluation incomplete:\n  {}",
            failed
                .iter()
                .map(|f| format!("scenario {f} failed in the guest"))
                .chain(problems.iter().cloned())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_expands_into_named_variants() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("knee.toml");
        std::fs::write(
            &p,
            r#"
name = "knee"
duration_s = 30
tierd_config = ""
[sweep]
var = "hot"
values = [100, 300]
[[container]]
name = "c"
cgroup = "t/c"
args = ["hotset", "--size-mib", "400", "--hot-mib", "{hot}"]
"#,
        )
        .unwrap();
        let v = load(&p, REFERENCE_DRAM_MIB).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "knee-hot100");
        assert_eq!(v[1].containers[0].args[4], "300");
        assert!(!v[1].text.contains("sweep"));
        assert_eq!(v[1].sweep, Some(("hot".into(), 300)));
    }

    #[test]
    fn below_local_low_starts_once_the_guarantee_is_used() {
        let mk = |t: f64, fast: f64, lower: f64| serde_json::json!({"t_s": t, "fast_bytes": fast * MIB, "lower_bytes": lower * MIB});
        // Ramp (0, 100 MiB), then at 400 MiB usage: 350 on DRAM, then 300,
        // then 360: only the 50 MiB × 5 s dip counts.
        let v = [
            mk(0.0, 0.0, 0.0),
            mk(5.0, 100.0, 0.0),
            mk(10.0, 350.0, 50.0),
            mk(15.0, 300.0, 100.0),
            mk(20.0, 360.0, 40.0),
        ];
        let r: Vec<&Value> = v.iter().collect();
        assert_eq!(below_local_low(&r, 350), 250.0);
        // A container smaller than its local_low is held to its size.
        assert_eq!(below_local_low(&r, 1000), 100.0 * 5.0 + 50.0 * 5.0 + 0.0);
    }

    /// Every shipped scenario loads (and its tierd config parses as TOML),
    /// at the reference size and scaled.
    #[test]
    fn every_scenario_file_loads() {
        let dir = testbed::workspace_root().join("benches/scenarios");
        let mut n = 0;
        let files = std::fs::read_dir(&dir)
            .unwrap()
            .chain(std::fs::read_dir(dir.join("cxl")).unwrap());
        for e in files {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            for dram in [REFERENCE_DRAM_MIB, 2 * REFERENCE_DRAM_MIB] {
                let scs = load(&p, dram).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                for sc in &scs {
                    let v: toml::Table = toml::from_str(&sc.text).unwrap();
                    let cfg = v["tierd_config"].as_str().unwrap();
                    toml::from_str::<toml::Table>(cfg)
                        .unwrap_or_else(|e| panic!("{}: tierd_config: {e}", p.display()));
                    assert!(!sc.containers.is_empty(), "{}", p.display());
                }
            }
            n += 1;
        }
        assert!(n >= 18, "only {n} scenario files in {}", dir.display());
    }

    #[test]
    fn sizes_scale_with_the_guest() {
        let mut t: toml::Table = toml::from_str(
            r#"
tierd_config = """
[[policy]]
local_low = "350MiB"
headroom = "64MiB"
weight = 100
"""
[[container]]
name = "a"
local_low_mib = 350
args = ["hotset", "--size-mib", "800", "--hot-mib", "50", "--report-s", "5"]
"#,
        )
        .unwrap();
        scale_sizes(&mut t, 2.0);
        let c = &t["container"].as_array().unwrap()[0];
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "hotset",
                "--size-mib",
                "1600",
                "--hot-mib",
                "100",
                "--report-s",
                "5"
            ]
        );
        assert_eq!(c["local_low_mib"].as_integer(), Some(700));
        let cfg = t["tierd_config"].as_str().unwrap();
        assert!(
            cfg.contains("\"700MiB\"") && cfg.contains("\"128MiB\""),
            "{cfg}"
        );
        assert!(cfg.contains("weight = 100"), "{cfg}");
    }

    /// The verdict compares each tierd mode with kernel tiering per metric:
    /// `=` within the metric's tolerance, else `ahead` or `BEHIND` by the
    /// metric's direction, and lists what is behind.
    /// Scenario "v": one container "x" from 0 s, 40 s long.
    fn scenario_v() -> ScenarioFile {
        ScenarioFile {
            name: "v".into(),
            text: String::new(),
            checkpoints_s: vec![],
            duration_s: 40,
            containers: vec![ContainerInfo {
                name: "x".into(),
                start_s: 0,
                args: vec![],
                local_low_mib: None,
            }],
            sweep: None,
            modes: None,
            modules: vec![],
            memory_kinds: false,
        }
    }

    #[test]
    fn verdict_marks_ahead_equal_and_behind() {
        let mut out = String::new();
        // 40 s run, samples every 10 s; tierd: better hit ratio, same
        // throughput within 3%, more migrations; kswapd+kdamond 20% of a
        // core under kernel tiering, 5% (+ tierd's 10%) under tierd, of
        // which kdamond 10% and 2%; the workloads' system time 30% and 20%
        // of a core, of which kernel promotions 10% and 1%; DAMON_STAT's
        // kdamond 5% and 40%, in no tiering row.
        for (mode, hit, thr, mig, kthreads, kdamond, tasks, promo, stat) in [
            ("kernel", 0.90, 100.0, 10.0, 0.2, 0.1, 0.3, 0.1, 0.05),
            ("tierd", 0.95, 99.0, 50.0, 0.05, 0.02, 0.2, 0.01, 0.4),
        ] {
            for t in [0, 10, 20, 30, 40] {
                out += &format!(
                    "SAMPLE {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"container\":\"x\",\"hit_ratio\":{hit},\"accesses_per_s\":{thr},\"local_ratio\":0.5}}\n"
                );
                out += &format!(
                    "HOST {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"pgmigrate_success\":{},\"fast_used_bytes\":9,\"fast_total_bytes\":10,\"tierd_cpu_s\":{},\"kernel_tiering_cpu_s\":{},\"kdamond_cpu_s\":{},\"workload_system_cpu_s\":{},\"kernel_promotion_cpu_s\":{},\"damon_stat_cpu_s\":{}}}\n",
                    mig * t as f64,
                    if mode == "kernel" { 0.0 } else { 0.1 * t as f64 },
                    kthreads * t as f64,
                    kdamond * t as f64,
                    tasks * t as f64,
                    promo * t as f64,
                    stat * t as f64
                );
            }
        }
        let s = parse_output(&out);
        let sc = scenario_v();
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        let (rows, behind) = verdict(&sc, &[&s["v"]], &modes);
        let line = |m: &str| rows.lines().find(|l| l.contains(m)).unwrap().to_string();
        assert!(
            line("x: hit ratio").ends_with("| 0.900 | 0.950 | ahead |"),
            "{rows}"
        );
        assert!(line("throughput").ends_with("| = |"), "{rows}");
        assert!(
            line("DRAM used, mean").ends_with("| 90.0 | 90.0 | = |"),
            "{rows}"
        );
        assert!(line("migrated").ends_with("| 10 | 50 | BEHIND |"), "{rows}");
        assert!(line("tierd CPU").ends_with("| – | 10.0 | – |"), "{rows}");
        assert!(
            line("kernel promotions in the tasks").ends_with("| 10.0 | 1.0 | ahead |"),
            "{rows}"
        );
        assert!(
            line("tiering CPU: tierd").ends_with("| 30.0 | 16.0 | ahead |"),
            "{rows}"
        );
        assert!(
            line("workloads' kernel time").ends_with("| 50.0 | 35.0 | ahead |"),
            "{rows}"
        );
        assert!(
            line("of which kdamond").ends_with("| 10.0 | 2.0 | – |"),
            "{rows}"
        );
        assert!(
            line("DAMON_STAT's kdamond").ends_with("| 5.0 | 40.0 | – |"),
            "{rows}"
        );
        // 400 and 2000 pages: the kernel's too few for a cost per page;
        // tierd's 16% of a core over 40 s is 6.4 s, 3200 µs a page.
        assert!(
            line("pages migrated in all").ends_with("| 0.4 | 2.0 | – |"),
            "{rows}"
        );
        assert!(
            line("tiering CPU per page").ends_with("| – | 3200 | – |"),
            "{rows}"
        );
        assert_eq!(
            behind,
            vec!["v / tierd: pages migrated/s, 2nd half".to_string()]
        );
        assert!(verdict_header(&modes)
            .starts_with("| scenario | metric | kernel | tierd | tierd vs kernel |"));
        assert!(
            !rows.contains("CPU it got"),
            "no cpu_s, no CPU rows: {rows}"
        );
    }

    #[test]
    fn a_tenants_cpu_is_shown_over_the_throughput_window_and_never_compared() {
        // 40 s, samples every 10 s; throughput rows read from 20 s on. The
        // tenant gets 80% of a core under kernel tiering and waits 10% of
        // the time, 50% and 40% under tierd, at the same throughput: the
        // same work costs it less CPU under kernel tiering, which counts
        // for no verdict.
        let mut out = String::new();
        for (mode, cpu, wait) in [("kernel", 0.8, 0.1), ("tierd", 0.5, 0.4)] {
            for t in [0, 10, 20, 30, 40] {
                // Before the window the tenant got a whole core: not counted.
                let (c, w) = if t <= 20 {
                    (t as f64, 0.0)
                } else {
                    (20.0 + cpu * (t - 20) as f64, wait * (t - 20) as f64)
                };
                out += &format!(
                    "SAMPLE {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"container\":\"x\",\"hit_ratio\":0.9,\"accesses_per_s\":2000000,\"local_ratio\":0.5,\"cpu_s\":{c},\"cpu_wait_s\":{w}}}\n"
                );
            }
        }
        let s = parse_output(&out);
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        let (rows, behind) = verdict(&scenario_v(), &[&s["v"]], &modes);
        let line = |m: &str| rows.lines().find(|l| l.contains(m)).unwrap().to_string();
        assert!(
            line("x: CPU it got").ends_with("| 80.0 | 50.0 | – |"),
            "{rows}"
        );
        assert!(
            line("x: waiting for a CPU").ends_with("| 10.0 | 40.0 | – |"),
            "{rows}"
        );
        assert!(
            line("x: M accesses per CPU-second").ends_with("| 2.500 | 4.000 | – |"),
            "{rows}"
        );
        assert!(
            behind.iter().all(|b| !b.contains("CPU it got")),
            "{behind:?}"
        );
    }

    /// Output of one run of scenario "v" (container "x"): per mode its hit
    /// ratio, constant over the run.
    fn run_v(hits: &[(&str, f64)]) -> String {
        let mut out = String::new();
        for (mode, hit) in hits {
            for t in [0, 10, 20, 30, 40] {
                out += &format!(
                    "SAMPLE {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"container\":\"x\",\"hit_ratio\":{hit}}}\n"
                );
            }
        }
        out
    }

    #[test]
    fn repeated_runs_compare_medians_beyond_the_kernels_own_spread() {
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        let verdict_of = |runs: &[[f64; 2]]| {
            let mut out = String::from("boot noise\n");
            for (k, [kernel, tierd]) in runs.iter().enumerate() {
                out += &format!("{REPEAT_MARKER} {}\n", k + 1);
                out += &run_v(&[("kernel", *kernel), ("tierd", *tierd)]);
            }
            let series = parse_repeats(&out);
            assert_eq!(series["v"].len(), runs.len());
            let runs: Vec<&Series> = series["v"].iter().collect();
            verdict(&scenario_v(), &runs, &modes)
        };
        // Kernel 0.80 / 0.90 / 0.96 (median 0.90, half-range 0.08); tierd's
        // median 0.85 is 0.05 behind: within the kernel's own spread.
        let (rows, behind) = verdict_of(&[[0.80, 0.85], [0.90, 0.84], [0.96, 0.86]]);
        assert!(
            rows.contains("| x: hit ratio | 0.900 (0.800–0.960) | 0.850 (0.840–0.860) | = |"),
            "{rows}"
        );
        assert!(behind.is_empty(), "{behind:?}");
        // Kernel steady at 0.90 ± 0.005: tierd's median 0.85 is behind.
        let (rows, behind) = verdict_of(&[[0.895, 0.85], [0.90, 0.84], [0.905, 0.86]]);
        assert!(rows.contains("| 0.850 (0.840–0.860) | BEHIND |"), "{rows}");
        assert_eq!(behind, vec!["v / tierd: x: hit ratio".to_string()]);
        // One bad tierd run out of three does not move the median.
        let (rows, _) = verdict_of(&[[0.90, 0.95], [0.90, 0.50], [0.90, 0.96]]);
        assert!(rows.contains("| 0.950 (0.500–0.960) | ahead |"), "{rows}");
    }

    #[test]
    fn a_row_shown_in_one_run_only_does_not_shift_the_others() {
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        // Two runs of 40 s. A kdamond ran under tierd in the first only
        // (10% of a core), so its row shows in that run and not in the
        // second. Pages migrated: 10k then 30k under kernel tiering, 20k
        // then 40k under tierd.
        let mut out = String::new();
        for (k, kdamond, pages) in [(1, 0.1, [10e3, 20e3]), (2, 0.0, [30e3, 40e3])] {
            out += &format!("{REPEAT_MARKER} {k}\n");
            for (mode, n) in ["kernel", "tierd"].into_iter().zip(pages) {
                let kd = if mode == "tierd" { kdamond } else { 0.0 };
                for t in [0.0, 40.0] {
                    out += &format!(
                        "HOST {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"pgmigrate_success\":{},\"fast_used_bytes\":9,\"fast_total_bytes\":10,\"tierd_cpu_s\":0,\"kernel_tiering_cpu_s\":{},\"kdamond_cpu_s\":{},\"workload_system_cpu_s\":0,\"kernel_promotion_cpu_s\":0,\"damon_stat_cpu_s\":0}}\n",
                        n * t / 40.0,
                        kd * t,
                        kd * t,
                    );
                }
            }
        }
        let series = parse_repeats(&out);
        let runs: Vec<&Series> = series["v"].iter().collect();
        let (rows, _) = verdict(&scenario_v(), &runs, &modes);
        assert!(
            rows.contains(
                "| pages migrated in all (thousands) | 20.0 (10.0–30.0) | 30.0 (20.0–40.0) | – |"
            ),
            "{rows}"
        );
        assert!(
            rows.contains("| of which kdamond (% of one core) | 0.0 | 10.0 | – |"),
            "{rows}"
        );
        // Each metric once.
        assert_eq!(rows.matches("pages migrated in all").count(), 1, "{rows}");
    }

    #[test]
    fn medians_and_spreads_of_runs() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        // "never" (infinite) sorts last and is a median like any value.
        assert_eq!(
            median(&[f64::INFINITY, 30.0, f64::INFINITY]),
            Some(f64::INFINITY)
        );
        assert_eq!(median(&[f64::INFINITY, 30.0, 40.0]), Some(40.0));
        assert_eq!(half_range(&[1.0]), 0.0);
        assert_eq!(half_range(&[1.0, 5.0, f64::INFINITY]), 2.0);
        // Without markers the whole output is one repeat.
        let one = parse_repeats(&run_v(&[("kernel", 0.9)]));
        assert_eq!(one["v"].len(), 1);
    }

    #[test]
    fn profiles_of_repeats_add_up() {
        let p = |cycles: u32, read: f64| {
            let mut s = Series::default();
            s.profile.insert(
                "tierd".into(),
                serde_json::json!({"cycles": cycles, "phases": [["read", read], ["solve", 0.001]]}),
            );
            s
        };
        let m = merged_profiles(&[p(10, 0.01), p(30, 0.05)]);
        let t = profile_table([("s", &m)]);
        // 40 cycles, 60 ms of read and 2 ms of solve in all.
        assert!(t.contains("| s | tierd | 40 | 1.50 | 0.05 | 1.55 |"), "{t}");
    }

    #[test]
    fn behind_on_a_container_kernel_gave_more_than_its_share_is_policy() {
        // Kernel tiering holds x at `held` MiB; tierd's target for it is
        // 400 MiB and its hit ratio lower.
        let run = |held: u64| {
            let mut out = String::new();
            for (mode, hit, fast, target) in [
                ("kernel", 0.99, held, "null".to_string()),
                ("tierd", 0.95, 400, (400u64 << 20).to_string()),
            ] {
                for t in [0, 10, 20, 30, 40] {
                    out += &format!(
                        "SAMPLE {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"container\":\"x\",\"hit_ratio\":{hit},\"fast_bytes\":{},\"target_bytes\":{target}}}\n",
                        fast << 20
                    );
                }
            }
            let sc = scenario_v();
            let modes = vec!["kernel".to_string(), "tierd".to_string()];
            verdict(&sc, &[&parse_output(&out)["v"]], &modes)
        };
        // 600 MiB held > 1.05 × 400: the policy, not a failure.
        let (rows, behind) = run(600);
        assert!(
            rows.contains("| x: hit ratio | 0.990 | 0.950 | policy |"),
            "{rows}"
        );
        assert!(behind.is_empty(), "{behind:?}");
        // 410 MiB is within 5% of the share: behind is behind.
        let (rows, behind) = run(410);
        assert!(
            rows.contains("| x: hit ratio | 0.990 | 0.950 | BEHIND |"),
            "{rows}"
        );
        assert_eq!(behind, vec!["v / tierd: x: hit ratio".to_string()]);
        // A repeat cut short before its kernel-only run does not outvote
        // the one that measured both (600 MiB held: policy).
        let both = run_x("kernel", 0.99, 600) + &run_x("tierd", 0.95, 400);
        let tierd_only = run_x("tierd", 0.95, 400);
        let out = format!("{REPEAT_MARKER} 1\n{both}{REPEAT_MARKER} 2\n{tierd_only}");
        let series = parse_repeats(&out);
        let runs: Vec<&Series> = series["v"].iter().collect();
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        let (rows, behind) = verdict(&scenario_v(), &runs, &modes);
        assert!(rows.contains("| policy |"), "{rows}");
        assert!(behind.is_empty(), "{behind:?}");
    }

    /// Samples of container "x" of scenario "v" under `mode`: hit ratio,
    /// fast-tier MiB, and (tierd) a 400 MiB target.
    fn run_x(mode: &str, hit: f64, fast_mib: u64) -> String {
        let target = if mode == "kernel" {
            "null".to_string()
        } else {
            (400u64 << 20).to_string()
        };
        (0..=40)
            .step_by(10)
            .map(|t| {
                format!(
                    "SAMPLE {{\"scenario\":\"v\",\"mode\":\"{mode}\",\"t_s\":{t},\"container\":\"x\",\"hit_ratio\":{hit},\"fast_bytes\":{},\"target_bytes\":{target}}}\n",
                    fast_mib << 20
                )
            })
            .collect()
    }

    #[test]
    fn profile_lines_become_a_per_phase_table() {
        let out = "PROFILE {\"scenario\":\"s\",\"mode\":\"tierd\",\"cycles\":10,\
                   \"phases\":[[\"read\",0.01],[\"solve\",0.002],[\"reclaim\",0.05]]}\n\
                   SAMPLE {\"scenario\":\"s\",\"mode\":\"tierd\",\"t_s\":0}\n";
        let series = parse_output(out);
        let t = profile_table([("s", &series["s"])]);
        // Columns: the phases the profile names, in its order.
        assert!(t.contains("| read | solve | reclaim | total |"), "{t}");
        // Totals over 10 cycles: 10 ms read, 2 ms solve, 50 ms reclaim.
        assert!(
            t.contains("| s | tierd | 10 | 1.00 | 0.20 | 5.00 | 6.20 |"),
            "{t}"
        );
        assert!(profile_table([("s", &Series::default())]).is_empty());
        // No CPU table from a profile without CPU times.
        assert!(!t.contains("CPU time"), "{t}");
    }

    #[test]
    fn cpu_times_per_phase_make_a_second_table() {
        let out = "PROFILE {\"scenario\":\"s\",\"mode\":\"tierd\",\"cycles\":10,\
                   \"phases\":[[\"read\",0.01],[\"reclaim\",0.05]],\
                   \"cpu_phases\":[[\"read\",0.004],[\"reclaim\",0.03]]}\n";
        let series = parse_output(out);
        let m = merged_profiles(&[series["s"].clone(), series["s"].clone()]);
        let t = profile_table([("s", &m)]);
        let (wall, cpu) = t.split_once("CPU time").expect("a CPU table");
        // 20 cycles: wall 20 ms read + 100 ms reclaim, CPU 8 + 60 ms.
        assert!(
            wall.contains("| s | tierd | 20 | 1.00 | 5.00 | 6.00 |"),
            "{t}"
        );
        assert!(
            cpu.contains("| s | tierd | 20 | 0.40 | 3.00 | 3.40 |"),
            "{t}"
        );
    }

    #[test]
    fn output_is_grouped_and_empty_series_are_problems() {
        let out = "noise\nSAMPLE {\"scenario\":\"a\",\"mode\":\"kernel\",\"t_s\":1,\"container\":\"x\",\"local_ratio\":0.5,\"fast_bytes\":1048576}\nHOST {\"scenario\":\"a\",\"mode\":\"kernel\",\"t_s\":1,\"pgmigrate_success\":10,\"fast_used_bytes\":1,\"fast_total_bytes\":2}\nSCENARIO_FAILED b\n";
        let s = parse_output(out);
        assert_eq!(s["a"].samples["kernel"].len(), 1);
        assert_eq!(failures(out), vec!["b".to_string()]);
        let sc = ScenarioFile {
            name: "a".into(),
            text: String::new(),
            checkpoints_s: vec![1],
            duration_s: 1,
            containers: vec![ContainerInfo {
                name: "x".into(),
                start_s: 0,
                args: vec![],
                local_low_mib: Some(2),
            }],
            sweep: None,
            modes: None,
            modules: vec![],
            memory_kinds: false,
        };
        let d = tempfile::tempdir().unwrap();
        let modes = vec!["kernel".to_string(), "tierd".to_string()];
        let (report, problems) = write_all(d.path(), &[sc], &s, &modes, "cmd").unwrap();
        assert!(report.contains("| kernel | x | 50.0 |"), "{report}");
        assert_eq!(
            problems,
            vec![
                "a / tierd: no container samples".to_string(),
                "a / tierd: no host samples".to_string()
            ]
        );
        assert!(check(&problems, &[]).is_err());
    }

    /// Runs `benches/scenarios/<file>` in the emulated host under `modes`
    /// for `duration_s` (a shortened run) and returns its series. Needs the
    /// release binaries (`cargo xtask test` builds them).
    fn run_scenario(file: &str, modes: &[&str], duration_s: u64) -> Series {
        let bins = testbed::guest_binaries(&["tierd", "tierctl", "tierload", "tierscen"])
            .unwrap_or_else(|e| {
                panic!(
                    "{e:#}\nrun the VM tests through `cargo xtask test`, which builds the binaries"
                )
            });
        let path = testbed::workspace_root()
            .join("benches/scenarios")
            .join(file);
        let sc = load(&path, REFERENCE_DRAM_MIB).unwrap().remove(0);
        let d = tempfile::tempdir().unwrap();
        let staged = d.path().join("scenario.toml");
        std::fs::write(&staged, &sc.text).unwrap();
        let guest = format!("/scenarios/{}.toml", sc.name);
        let modes: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
        let cfg = testbed::VmConfig {
            binaries: bins,
            files: vec![(staged, guest.clone())],
            timeout: std::time::Duration::from_secs(120 + modes.len() as u64 * (duration_s + 60)),
            modules: sc.modules.clone(),
            ..Default::default()
        };
        let out = testbed::run(
            &cfg,
            &script(&[(sc.clone(), guest)], &modes, Some(duration_s)),
        )
        .unwrap_or_else(|e| panic!("emulated CXL host failed: {e:#}"));
        assert_eq!(out.exit_code, 0, "{}", out.output);
        // tierscen's account of who moved what (shown on a failure).
        for l in out.output.lines().filter(|l| l.contains("second half")) {
            println!("{l}");
        }
        let mut series = parse_output(&out.output);
        series
            .remove(&sc.name)
            .unwrap_or_else(|| panic!("no samples of {}:\n{}", sc.name, out.output))
    }

    /// A mode's samples of one container, by time (s, rounded).
    fn by_time<'a>(s: &'a Series, mode: &str, container: &str) -> BTreeMap<i64, &'a Value> {
        s.samples[mode]
            .iter()
            .filter(|v| v["container"] == container)
            .map(|v| (f(v, "t_s").unwrap_or(0.0).round() as i64, v))
            .collect()
    }

    /// One line per container: `t:fast/target` in MiB at each sample, for
    /// failure messages.
    fn trace(series: &[(&str, &BTreeMap<i64, &Value>)]) -> String {
        let mib = |v: &Value, k: &str| f(v, k).map_or(-1.0, |b| b / 1048576.0);
        series
            .iter()
            .map(|(name, s)| {
                let points: Vec<String> = s
                    .iter()
                    .map(|(t, v)| {
                        format!(
                            "{t}:{:.0}/{:.0}",
                            mib(v, "fast_bytes"),
                            mib(v, "target_bytes")
                        )
                    })
                    .collect();
                format!("{name}: {}", points.join(" "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// skew.toml, shortened: two 600 MiB cache tenants with Zipf 0.6 and
    /// 1.2 popularity and equal weights get the same share of DRAM (targets
    /// within 2% of the fast tier at every sample from 30 s), and the
    /// skewed one, whose accesses concentrate on fewer pages, has the higher
    /// hit ratio from it. At the end the two hold fast-tier bytes within 10%
    /// of the fast tier of each other, or the one below its target has its
    /// hot set on DRAM (hottest 10% ≥ 0.98, hit ratio ≥ 0.95): tierd is
    /// work-conserving and demotes its neighbour's pages only for pages it
    /// promotes, and the skewed tenant's lower-tier tail (Zipf 1.2 ranks
    /// beyond ~90k: 1–2% of its accesses, each page ~15× colder than the
    /// flat tenant's coldest DRAM page) may draw no promotion for tens of
    /// seconds (docs/NOTES.md "Skew: the work-conserving end state").
    #[test]
    fn skewed_and_flat_tenants_get_equal_dram_and_different_hit_ratios() {
        let s = run_scenario("skew.toml", &["tierd"], 60);
        let fast_total = f(s.host["tierd"].last().unwrap(), "fast_total_bytes").unwrap();
        let (flat, skewed) = (by_time(&s, "tierd", "flat"), by_time(&s, "tierd", "skewed"));
        let mut checked = 0;
        for (t, a) in flat.range(30..) {
            let Some(b) = skewed.get(t) else { continue };
            let (ta, tb) = (f(a, "target_bytes").unwrap(), f(b, "target_bytes").unwrap());
            assert!(
                (ta - tb).abs() <= 0.02 * fast_total,
                "t = {t} s: targets {ta} vs {tb} differ by more than 2% of {fast_total}"
            );
            checked += 1;
        }
        assert!(checked >= 3, "too few samples from 30 s: {checked}");
        let (a, b) = (
            flat.values().last().unwrap(),
            skewed.values().last().unwrap(),
        );
        let (fa, fb) = (f(a, "fast_bytes").unwrap(), f(b, "fast_bytes").unwrap());
        // Printed (shown on failure) so a slow convergence can be told from
        // a wrong target.
        println!(
            "MiB by time (fast / target):\n{}",
            trace(&[("flat", &flat), ("skewed", &skewed)])
        );
        let (ha, hb) = (f(a, "hit_ratio").unwrap(), f(b, "hit_ratio").unwrap());
        if (fa - fb).abs() > 0.10 * fast_total {
            let (name, low) = if fa < fb { ("flat", a) } else { ("skewed", b) };
            let (fast, target) = (
                f(low, "fast_bytes").unwrap(),
                f(low, "target_bytes").unwrap(),
            );
            let (hot, hit) = (
                f(low, "hot_residency").unwrap_or(0.0),
                f(low, "hit_ratio").unwrap_or(0.0),
            );
            assert!(
                fast < target && hot >= 0.98 && hit >= 0.95,
                "fast-tier bytes at the end {fa} vs {fb}, and {name} ({fast} of a {target}-byte \
                 target) does not have its hot set on DRAM: hottest 10% {hot}, hit ratio {hit}"
            );
        }
        assert!(hb > ha, "hit ratio skewed {hb} <= flat {ha}");
    }

    /// paced-pair.toml, shortened: two identical 700 MiB Zipf(0.9) cache
    /// tenants paced at 300k accesses/s (sparse hotness signals), 1.4× more
    /// footprint than DRAM. Under tierd they share DRAM (fast-tier bytes
    /// within 10% of the fast tier of each other: the split is tierd's) and
    /// neither hit ratio falls below 0.70. Which pages of each share sit on
    /// DRAM is the kernel's LRU and promotion order, and once NUMA
    /// balancing's scan of a task has backed off its passes come tens of
    /// seconds to a minute apart, so the newcomer's hit ratio stays for a
    /// minute or more wherever the last pass left it, in either mode: in
    /// one boot (session 45, docs/NOTES.md
    /// "Paced pair: the newcomer's hit ratio is where the scan stopped")
    /// kernel tiering's newcomer ended at 0.86 and 0.75 (the second held
    /// at 0.78 from 55 to 85 s with nothing migrated), tierd's at 0.83 and
    /// 0.87; this test's own runs ended at 0.74–0.87. The guard catches a
    /// collapse (the defaults before issue 11 left one tenant at 0.56 in an
    /// outside evaluation); issue 11's bar (0.85) is decided by the demo.
    #[test]
    fn paced_pair_tenants_share_dram_and_hit_ratio() {
        let s = run_scenario("paced-pair.toml", &["tierd"], 75);
        let fast_total = f(s.host["tierd"].last().unwrap(), "fast_total_bytes").unwrap();
        let last = |c: &str| {
            let v = by_time(&s, "tierd", c);
            let v = *v.values().last().unwrap();
            (f(v, "hit_ratio").unwrap(), f(v, "fast_bytes").unwrap())
        };
        let (a, b) = (last("paced-a"), last("paced-b"));
        // The course: (t, fast MiB / target MiB, hit ratio) per tenant,
        // printed so a failure shows whether a tenant lacked bytes or pages.
        let course = {
            let (va, vb) = (
                by_time(&s, "tierd", "paced-a"),
                by_time(&s, "tierd", "paced-b"),
            );
            let mib = |v: &Value, k: &str| f(v, k).map_or(-1, |x| (x / MIB) as i64);
            va.iter()
                .filter_map(|(t, x)| {
                    let y = vb.get(t)?;
                    let hit = |v: &Value| f(v, "hit_ratio").unwrap_or(-1.0);
                    Some(format!(
                        "{t}s {}/{} {:.3} {}/{} {:.3}",
                        mib(x, "fast_bytes"),
                        mib(x, "target_bytes"),
                        hit(x),
                        mib(y, "fast_bytes"),
                        mib(y, "target_bytes"),
                        hit(y)
                    ))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("course (fast/target MiB, hit ratio; a then b): {course}");
        assert!(
            a.0.min(b.0) >= 0.70,
            "tierd hit ratios {} / {} (guard 0.70)",
            a.0,
            b.0
        );
        assert!(
            (a.1 - b.1).abs() <= 0.10 * fast_total,
            "fast-tier bytes {} vs {} (the course is printed above)",
            a.1,
            b.1
        );
    }

    /// hetero.toml, shortened: an `opt_out` service stays wholly on DRAM,
    /// the `local_low` 250 MiB tenant holds its guarantee (less a 16 MiB
    /// band) from 30 s, the weight-300 tenant's target is three times the
    /// weight-100 batch tenant's (or its whole usage) while the batch
    /// tenant runs, and within 10 s of the batch tenant's exit the others'
    /// targets take its share: each reaches its whole usage (the pool now
    /// exceeds what they use). The exit is found in the samples (the
    /// batch tenant's last one with memory), not assumed: its 55 s of
    /// accesses start once it has touched its 600 MiB, 6–15 s under
    /// emulation, and the exit frees that memory over a few more seconds
    /// (one CI run saw it last at 75 s), so the run is the scenario's full
    /// 100 s, room for a sample 10 s after an exit up to 90 s.
    #[test]
    fn heterogeneous_tenants_keep_their_policies_and_re_spread_an_exit() {
        let s = run_scenario("hetero.toml", &["tierd"], 100);
        const MIB_F: f64 = MIB;
        let pinned = by_time(&s, "tierd", "pinned");
        for (t, v) in pinned.range(15..) {
            let r = f(v, "local_ratio").unwrap();
            assert!(r >= 0.99, "t = {t} s: opt_out service {r} on DRAM");
        }
        let g = by_time(&s, "tierd", "guaranteed");
        // (t, fast, lower, target) MiB, so a failure shows the whole course.
        let course_of = |name: &str| -> Vec<String> {
            by_time(&s, "tierd", name)
                .iter()
                .map(|(t, v)| {
                    let mib = |k| f(v, k).unwrap_or(0.0) / MIB_F;
                    format!(
                        "{t}:{:.0}/{:.0}/{:.0}",
                        mib("fast_bytes"),
                        mib("lower_bytes"),
                        mib("target_bytes")
                    )
                })
                .collect()
        };
        for name in ["batch", "heavy"] {
            eprintln!(
                "{name} tenant (t:fast/lower/target MiB): {}",
                course_of(name).join(" ")
            );
        }
        let course = course_of("guaranteed");
        eprintln!(
            "guaranteed tenant (t:fast/lower/target MiB): {}",
            course.join(" ")
        );
        for (t, v) in g.range(30..) {
            let fast = f(v, "fast_bytes").unwrap() / MIB_F;
            assert!(
                fast >= 250.0 - 16.0,
                "t = {t} s: guaranteed tenant at {fast:.0} MiB (t: fast/lower/target MiB: {})",
                course.join(" ")
            );
        }
        // Weights: while the weight-100 batch tenant is held to its share
        // (target under its usage), the weight-300 tenant's target is three
        // times the batch's, or its whole usage. (Not "at least the
        // guaranteed tenant's": that one has its 250 MiB floor plus a share,
        // which exceeds 3 × the batch's share whenever the pool is under
        // ~710 MiB, as it is in some boots.)
        let heavy = by_time(&s, "tierd", "heavy");
        let batch = by_time(&s, "tierd", "batch");
        let usage =
            |v: &Value| f(v, "fast_bytes").unwrap_or(0.0) + f(v, "lower_bytes").unwrap_or(0.0);
        // Only samples where the heavy tenant's usage held still since the
        // previous one: tierd's target comes from its last cycle's usage, so
        // while the tenant still grows (a CI run: 204 → 305 MiB in 25–30 s)
        // the target trails the usage the sample reads.
        let mut weighed = 0;
        for (&t, h) in heavy.range(30..=60) {
            let Some(b) = batch.get(&t) else {
                continue;
            };
            let Some((_, prev)) = heavy.range(..t).next_back() else {
                continue;
            };
            if (usage(h) - usage(prev)).abs() > 0.02 * usage(h) {
                continue;
            }
            let (th, tb) = (f(h, "target_bytes").unwrap(), f(b, "target_bytes").unwrap());
            if tb >= 0.95 * usage(b) {
                continue;
            }
            weighed += 1;
            let want = usage(h).min(3.0 * tb);
            assert!(
                th >= 0.95 * want,
                "t = {t} s: weight-300 target {:.0} MiB < 3 × the weight-100 batch's {:.0} MiB (or its usage {:.0} MiB)",
                th / MIB_F,
                tb / MIB_F,
                usage(h) / MIB_F
            );
        }
        assert!(
            weighed > 0,
            "no sample at 30-60 s with the batch tenant held to its share and the \
             weight-300 tenant's usage steady"
        );
        // The batch tenant's last sample with memory: its exit.
        let exit = batch
            .iter()
            .filter(|(_, v)| {
                f(v, "fast_bytes").unwrap_or(0.0) + f(v, "lower_bytes").unwrap_or(0.0) > 0.0
            })
            .map(|(t, _)| *t)
            .max()
            .expect("batch tenant never ran");
        assert!(
            (45..=90).contains(&exit),
            "batch tenant last seen at {exit} s (its 55 s of accesses after touching its memory end after 45 s, and an exit after 90 s leaves no sample 10 s later)"
        );
        for (name, series) in [("guaranteed", &g), ("heavy", &heavy)] {
            let (t, v) = series
                .range(exit + 10..)
                .next()
                .unwrap_or_else(|| panic!("no {name} sample 10 s after the exit at {exit} s"));
            let usage = f(v, "fast_bytes").unwrap() + f(v, "lower_bytes").unwrap();
            let target = f(v, "target_bytes").unwrap();
            assert!(
                target >= 0.95 * usage,
                "t = {t} s: {name} target {target} below its usage {usage} after the exit"
            );
        }
    }

    /// The harness end to end at small size, so it cannot silently rot: a
    /// 15 s scenario with two small containers under kernel tiering and
    /// tierd (move_pages) in the emulated host, parsed, tabled and plotted.
    /// Needs the release binaries (`cargo xtask test` builds them).
    #[test]
    fn smoke_run_in_the_emulated_host() {
        let bins = testbed::guest_binaries(&["tierd", "tierctl", "tierload", "tierscen"])
            .unwrap_or_else(|e| {
                panic!(
                    "{e:#}\nrun the VM tests through `cargo xtask test`, which builds the binaries"
                )
            });
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("smoke.toml");
        // Every scenario feature once: a module, setup and teardown, an
        // event, a launch through `tierd exec` (weights 1:1: half of `a`
        // on node 1 under tierd, none under kernel tiering), memory by
        // kind, a metric family.
        std::fs::write(
            &p,
            r#"
name = "smoke"
duration_s = 15
sample_s = 3
checkpoints_s = [6, 15]
modes = ["kernel", "tierd-pages"]
modules = ["loop"]
setup = ["echo ready > /tmp/smoke-setup"]
teardown = ["rm /tmp/smoke-setup"]
memory_kinds = true
report_metrics = ["tierd_topology_changes_total"]
tierd_config = """
[daemon]
interval = "1s"
[[policy]]
name = "bw"
match = "tenants.slice/a"
placement = "interleave"
interleave_weights = { fast = 1, lower = 1 }
[[policy]]
match = "tenants.slice/*"
"""
[[container]]
name = "a"
cgroup = "tenants.slice/a"
policy = "bw"
args = ["hotset", "--size-mib", "32", "--hot-mib", "8", "--report-s", "2"]
[[container]]
name = "b"
cgroup = "tenants.slice/b"
start_s = 3
local_low_mib = 16
args = ["hotset", "--size-mib", "32", "--hot-mib", "8", "--report-s", "2"]
[[event]]
at_s = 5
run = "test -d /sys/module/loop && echo \"loop loaded, setup $(cat /tmp/smoke-setup)\""
"#,
        )
        .unwrap();
        let scenarios = load(&p, REFERENCE_DRAM_MIB).unwrap();
        let staged_path = d.path().join("staged.toml");
        std::fs::write(&staged_path, &scenarios[0].text).unwrap();
        let staged = vec![(scenarios[0].clone(), "/scenarios/smoke.toml".to_string())];
        let cfg = testbed::VmConfig {
            binaries: bins,
            files: vec![(staged_path, "/scenarios/smoke.toml".into())],
            timeout: std::time::Duration::from_secs(300),
            modules: scenarios[0].modules.clone(),
            ..Default::default()
        };
        let out = testbed::run(
            &cfg,
            &script(&staged, &[], None).replace(
                "exit $FAILED\n",
                "test -e /tmp/smoke-setup || echo TEARDOWN-DONE\nexit $FAILED\n",
            ),
        )
        .unwrap_or_else(|e| panic!("emulated CXL host failed: {e:#}"));
        assert_eq!(out.exit_code, 0, "{}", out.output);
        let series = parse_output(&out.output);
        let modes = scenarios[0].modes(&[]);
        let (report, problems) =
            write_all(&d.path().join("out"), &scenarios, &series, &modes, "smoke").unwrap();
        check(&problems, &failures(&out.output)).unwrap();
        for m in ["kernel", "tierd-pages"] {
            assert!(series["smoke"].samples[m].len() >= 8, "{m}: {}", out.output);
        }
        assert!(report.contains("| tierd-pages | b |"), "{report}");
        // tierd's cycle profile: wall and CPU time per phase, the CPU (one
        // thread's, capped at the wall time where the guest's clocks drift)
        // never above the wall time of the same phase, and below it in all:
        // the DAMON phase waits for kdamond.
        let prof = &series["smoke"].profile["tierd-pages"];
        let per = |key: &str| -> BTreeMap<String, f64> {
            prof[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| Some((x[0].as_str()?.to_owned(), x[1].as_f64()?)))
                .collect()
        };
        let (wall, cpu) = (per("phases"), per("cpu_phases"));
        assert!(cpu.values().sum::<f64>() > 0.0, "{prof}");
        assert!(
            cpu.values().sum::<f64>() < wall.values().sum::<f64>(),
            "{prof}"
        );
        for (phase, c) in &cpu {
            assert!(
                *c <= wall[phase] + 1e-3,
                "{phase}: CPU {c} s > wall: {prof}"
            );
        }
        assert!(
            profile_table([("smoke", &series["smoke"])]).contains("CPU time of its thread"),
            "{prof}"
        );
        assert!(d.path().join("out/smoke/fast-bytes.png").is_file());
        assert!(d.path().join("out/smoke/residency.png").is_file());
        // The event ran in both modes, after the module and the setup.
        assert_eq!(
            out.output
                .matches("EVENT | loop loaded, setup ready")
                .count(),
            2,
            "{}",
            out.output
        );
        assert!(out.output.contains("TEARDOWN-DONE"), "{}", out.output);
        assert!(report.contains("| anon fast / lower (MiB) |"), "{report}");
        assert!(
            report.contains("tierd metrics at the end of tierd-pages")
                && report.contains("tierd_topology_changes_total 0"),
            "{report}"
        );
        // `a` through tierd exec: interleaved 1:1 under tierd only.
        let lower_share = |mode: &str| {
            let v = series["smoke"].samples[mode]
                .iter()
                .rfind(|v| v["container"] == "a")
                .unwrap();
            f(v, "lower_bytes").unwrap()
                / (f(v, "fast_bytes").unwrap() + f(v, "lower_bytes").unwrap())
        };
        let (k, t) = (lower_share("kernel"), lower_share("tierd-pages"));
        assert!(
            k < 0.1 && (0.35..0.65).contains(&t),
            "a's lower-tier share: kernel {k:.2}, tierd {t:.2}\n{}",
            out.output
        );
    }
}
