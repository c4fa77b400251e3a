//! The daemon: kernel settings, the tokio control loop, the HTTP endpoint and
//! systemd notification. `run` takes its shutdown signal as a future so tests
//! and the binary drive it alike (the mini-redis pattern).

use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use nix::sys::signal::{SigSet, Signal as NixSignal};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, PromotionMode};
use crate::controller::{Controller, Status};
use crate::journal::{self, Journal, SharedJournal};
use crate::metrics::Metrics;
use crate::sysctl::{KernelKnobs, DEMOTION_ENABLED, NUMA_BALANCING};

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Status>>,
    reloads: mpsc::Sender<Option<ReloadReply>>,
}

/// Where the outcome of a reload asked over HTTP goes: `Ok` with what was
/// applied, `Err` with why the new config was refused.
type ReloadReply = oneshot::Sender<std::result::Result<String, String>>;

/// The signals the daemon obeys, registered with the kernel when
/// [`Signals::install`] returns: a signal that arrives later, even before
/// the loop first polls them (during the DAMON claim or the BPF load), is
/// kept and acted on. SIGTERM/SIGINT stop tierd with everything restored;
/// SIGHUP reloads the config (its default action would kill tierd).
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

/// SIGTERM, SIGINT and SIGHUP held pending in the thread that called
/// [`Signals::block`] (and in every thread it starts afterwards) until
/// [`Signals::install`] has listeners for them.
pub struct BlockedSignals(SigSet);

impl Signals {
    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread. Call it
    /// before the tokio runtime is built, so that its threads inherit the
    /// mask and only the thread that later calls [`Signals::install`]
    /// takes them.
    ///
    /// Why: tokio's `signal()` installs the process's handler before it
    /// subscribes the listener (`signal_with_handle`, tokio 1.54), and a
    /// signal its driver broadcasts in between reaches no one. A stop sent
    /// in that instant was ignored, handler installed, and tierd ran on.
    ///
    /// Errors: `pthread_sigmask(2)` fails (it does not for valid signals).
    pub fn block() -> nix::Result<BlockedSignals> {
        let mut set = SigSet::empty();
        for s in [NixSignal::SIGTERM, NixSignal::SIGINT, NixSignal::SIGHUP] {
            set.add(s);
        }
        set.thread_block()?;
        Ok(BlockedSignals(set))
    }

    /// Registers SIGTERM, SIGINT and SIGHUP handlers, then unblocks them in
    /// the calling thread: a signal sent since [`Signals::block`] is
    /// delivered now, to listeners that exist. Must run inside the tokio
    /// runtime (the binary's `block_on` thread, the one that blocked them),
    /// before anything is written.
    ///
    /// Errors: the handlers cannot be registered (no signal driver), or the
    /// mask cannot be restored.
    pub fn install(blocked: BlockedSignals) -> std::io::Result<Signals> {
        let signals = Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        };
        blocked.0.thread_unblock().map_err(std::io::Error::from)?;
        Ok(signals)
    }
}

async fn metrics_handler(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// `/status`: the last cycle's view. Until the first cycle has completed
/// (starting kdamonds and the probe can take a while) it answers 503, so that
/// `tierctl status` and health checks never read an empty container list as
/// "nothing managed".
async fn status_handler(State(s): State<Shared>) -> axum::response::Response {
    let status = s.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if status.cycles == 0 {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "tierd is starting: no control cycle has completed yet\n",
        )
            .into_response();
    }
    axum::Json(status).into_response()
}

/// `POST /reload`: reloads the config file as SIGHUP does and answers with
/// the outcome (200 and what was applied, or 422 and why the file was
/// refused, the running config unchanged). The listener is loopback by
/// default; anyone who can reach it can ask for a reload of the file root
/// owns, nothing more.
async fn reload_handler(State(s): State<Shared>) -> axum::response::Response {
    let (tx, rx) = oneshot::channel();
    if s.reloads.send(Some(tx)).await.is_err() {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "tierd is stopping\n",
        )
            .into_response();
    }
    match rx.await {
        Ok(Ok(msg)) => (axum::http::StatusCode::OK, format!("{msg}\n")).into_response(),
        Ok(Err(msg)) => (
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            format!("{msg}\n"),
        )
            .into_response(),
        Err(_) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "tierd stopped before reloading\n",
        )
            .into_response(),
    }
}

/// Reads the config file again and applies what can change while running
/// ([`Controller::reload`]). A file that does not load leaves the running
/// config as it is. Returns the line that is also logged.
fn reload(controller: &mut Controller) -> std::result::Result<String, String> {
    let path = controller.config().source.clone();
    match Config::load(&path) {
        Err(e) => {
            let msg = format!("reload refused, running config kept: {e}");
            tracing::error!("{msg}");
            Err(msg)
        }
        Ok(new) => {
            let restart = controller.reload(new);
            let c = controller.config();
            let mut msg = format!(
                "reloaded {}: {} policies, interval {:?}",
                path.display(),
                c.policies.len(),
                c.daemon.interval
            );
            if !restart.is_empty() {
                msg += &format!(
                    "; changes to {} take effect at the next restart",
                    restart.join(", ")
                );
                tracing::warn!("{msg}");
            } else {
                tracing::info!("{msg}");
            }
            Ok(msg)
        }
    }
}

/// Removes the journal when dropped, after the actuators declared later
/// have restored: on a clean stop, an error return and a panic alike.
struct JournalGuard(SharedJournal);

impl Drop for JournalGuard {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).finish();
    }
}

/// Sets the host-wide knobs the config asks for, NUMA balancing for the
/// promotion mode in effect (`promotion`, see [`Controller::promotion`]). In
/// observe-only mode nothing is changed.
fn apply_knobs(cfg: &Config, promotion: PromotionMode, knobs: &mut KernelKnobs) -> Result<()> {
    let d = &cfg.daemon;
    knobs.set(
        &d.sysfs_root.join(DEMOTION_ENABLED),
        if d.demotion_enabled { "1" } else { "0" },
    )?;
    if let Some(nb) = numa_balancing_for(cfg, promotion) {
        knobs.set(&d.procfs_root.join(NUMA_BALANCING), &nb.to_string())?;
    }
    Ok(())
}

/// `kernel.numa_balancing` for the promotion mode in effect, or None to
/// leave the host's. With `promotion = "tierd"` the kernel must not promote
/// behind tierd's back (the tiering bit, 2, cleared); while that mode falls
/// back to the kernel's promotion (DAMON unavailable) the bit is set.
fn numa_balancing_for(cfg: &Config, promotion: PromotionMode) -> Option<u32> {
    let d = &cfg.daemon;
    match (d.promotion, promotion) {
        (PromotionMode::Kernel, _) => d.numa_balancing,
        (PromotionMode::Tierd, PromotionMode::Tierd) => Some(d.numa_balancing.unwrap_or(0) & !2),
        (PromotionMode::Tierd, PromotionMode::Kernel) => Some(d.numa_balancing.unwrap_or(0) | 2),
    }
}

/// Follows a change of the promotion mode in effect (DAMON lost or claimed
/// again with `promotion = "tierd"`): sets `kernel.numa_balancing` and says
/// why. The original value stays journalled for the restore at exit.
fn switch_promotion(controller: &Controller, promotion: PromotionMode, knobs: &mut KernelKnobs) {
    let cfg = controller.config();
    let Some(nb) = numa_balancing_for(cfg, promotion) else {
        return;
    };
    let path = cfg.daemon.procfs_root.join(NUMA_BALANCING);
    if let Err(e) = knobs.set(&path, &nb.to_string()) {
        tracing::error!(error = format!("{e:#}"), "cannot switch the promotion mode");
        return;
    }
    match promotion {
        PromotionMode::Kernel => tracing::error!(
            reason = controller.damon_off_reason().unwrap_or("unknown"),
            numa_balancing = nb,
            "promotion = \"tierd\" finds the pages to promote with DAMON, which is unavailable: the kernel's NUMA balancing promotes until tierd can claim DAMON (retried every {} cycles)",
            crate::controller::DAMON_RETRY_CYCLES
        ),
        PromotionMode::Tierd => tracing::info!(
            numa_balancing = nb,
            "DAMON claimed: tierd promotes (promotion = \"tierd\"), the kernel's promotion off"
        ),
    }
}

/// Runs the daemon until SIGTERM or SIGINT, then restores every kernel and
/// cgroup setting it changed. SIGHUP (or `POST /reload`) reloads the config.
/// The signals are installed by the caller before this is called, so a stop
/// at any instant — during the DAMON claim, the BPF load, the first cycle —
/// restores what was written up to then (the controller's and the sysctls'
/// drop guards cover error returns and panics too).
///
/// Errors: the metrics address cannot be bound, the cgroup hierarchy or
/// sysfs cannot be used, or a kernel knob cannot be set at start (all
/// before the loop starts). Failures inside a cycle are logged and counted
/// (`tierd_loop_errors_total`); the loop keeps running.
pub async fn run(cfg: Config, signals: Signals) -> Result<()> {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    };
    let (reload_tx, mut reload_rx) = mpsc::channel::<Option<ReloadReply>>(4);
    let hup_tx = reload_tx.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            if hup_tx.send(None).await.is_err() {
                break;
            }
        }
    });
    // What a tierd that died left changed goes back first, so that nothing
    // below reads tierd's own earlier writes as originals.
    let journal_file = cfg.daemon.journal.clone();
    let restored = journal::restore_leftover(&journal_file, |file| {
        let dir = file.parent()?;
        std::fs::metadata(dir).ok().map(|m| m.ino())
    })
    .with_context(|| format!("key daemon.journal in {}", cfg.source.display()))?;
    if restored > 0 {
        tracing::warn!(
            restored,
            journal = %journal_file.display(),
            "a previous tierd stopped without restoring; its changes were undone"
        );
    }
    // Declared before the actuators so it is dropped after them: the
    // journal goes only once they have restored (or tried to).
    let journal = JournalGuard(Arc::new(Mutex::new(Journal::new(Some(journal_file)))));
    let metrics = Arc::new(Metrics::new(cfg.daemon.promotion.as_str()));
    let status = Arc::new(Mutex::new(Status::default()));
    let mut controller = Controller::new(cfg.clone(), metrics.clone(), status.clone())?;
    controller.set_journal(journal.0.clone());

    let listener = tokio::net::TcpListener::bind(cfg.listen_addr())
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (key daemon.metrics_listen in {})",
                cfg.listen_addr(),
                cfg.source.display()
            )
        })?;
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/status", get(status_handler))
        .route("/reload", post(reload_handler))
        .with_state(Shared {
            metrics: metrics.clone(),
            status,
            reloads: reload_tx,
        });
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = http_stopped.await;
            })
            .await
    });
    tracing::info!(addr = %cfg.listen_addr(), "serving /metrics and /status");

    let mut knobs = KernelKnobs::with_journal(journal.0.clone());
    let mut promotion = controller.promotion();
    if !controller.observe_only() {
        if promotion != cfg.daemon.promotion {
            switch_promotion(&controller, promotion, &mut knobs);
        }
        apply_knobs(&cfg, promotion, &mut knobs)?;
        if let Err(e) = controller.apply_interleave(&mut knobs) {
            // The rest of the policies still work: such containers are
            // managed as tiered ones meanwhile.
            tracing::error!(
                "placement = \"interleave\" in {}: {e:#}; those containers are managed as \
                 placement = \"tiered\" until tierd is restarted with it fixed",
                cfg.source.display()
            );
        }
    }

    let mut ready = false;
    let mut watchdog_usec = 0u64;
    let watchdog = sd_notify::watchdog_enabled(false, &mut watchdog_usec);

    let mut ticker = tokio::time::interval(cfg.daemon.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A cgroup made where a policy can match one runs the check at once
    // (arrivals.rs); without inotify, arrivals are seen at the interval.
    let mut arrivals = match crate::arrivals::ArrivalWatch::new() {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "inotify unavailable: a new container is seen at the next interval, not when its cgroup is made");
            None
        }
    };
    // Not more often than this after an arrival's check: a burst of new
    // cgroups (a host starting many units) costs a check per gap at most.
    let mut next_arrival = tokio::time::Instant::now();
    let mut arrival;
    tokio::pin!(shutdown);
    loop {
        // Biased: a stop that is already pending wins over a due cycle.
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(reply) = reload_rx.recv() => {
                let interval = controller.config().daemon.interval;
                let res = reload(&mut controller);
                let new_interval = controller.config().daemon.interval;
                if new_interval != interval {
                    ticker = tokio::time::interval_at(
                        tokio::time::Instant::now() + new_interval,
                        new_interval,
                    );
                    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                if let Some(reply) = reply {
                    let _ = reply.send(res);
                }
                continue;
            }
            _ = ticker.tick() => arrival = false,
            res = created(arrivals.as_mut(), next_arrival) => {
                if let Err(e) = res {
                    tracing::warn!(error = %e, "inotify read failed; new containers are seen at the next interval");
                    arrivals = None;
                    continue;
                }
                arrival = true;
            }
        }
        // A cycle does blocking cgroupfs I/O (memory.reclaim can take seconds),
        // so it runs off the async workers; the controller moves there and back.
        let cycle_started = tokio::time::Instant::now();
        let (c, res) = tokio::task::spawn_blocking(move || {
            let res = if arrival {
                controller.on_arrival()
            } else {
                controller.tick()
            };
            (controller, res)
        })
        .await
        .context("control-loop cycle panicked")?;
        controller = c;
        let interval = controller.config().daemon.interval;
        if arrival {
            next_arrival = tokio::time::Instant::now() + interval / 8;
        }
        // While a newcomer fills its share, a cycle starts every quarter
        // interval, or as soon as the last one ends when it took longer:
        // each makes the room the allocation will take next, so the rest of
        // it lands on the fast tier (policy::Plan::filling). A pause after
        // a cycle that spent its quarter demoting would leave the fill
        // outrunning the room (docs/NOTES.md "Session 72").
        if matches!(&res, Ok(Some(plan)) if !plan.filling.is_empty()) {
            ticker.reset_at(cycle_started + interval / 4);
        }
        if let Some(w) = arrivals.as_mut() {
            w.sync(controller.arrival_dirs());
        }
        if !controller.observe_only() && controller.promotion() != promotion {
            promotion = controller.promotion();
            switch_promotion(&controller, promotion, &mut knobs);
        }
        if let Err(e) = res {
            metrics.loop_errors.inc();
            tracing::warn!(
                error = format!("{e:#}"),
                "control-loop cycle failed; retrying next interval"
            );
        }
        // Ready once the first cycle has run (whatever its outcome): from
        // then on /status answers and tierd manages what it found.
        if !ready {
            ready = true;
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
        }
        if watchdog {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        }
    }

    tracing::info!("shutting down: restoring kernel and cgroup settings");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    controller.restore();
    knobs.restore();
    let _ = stop_http.send(());
    let _ = server.await;
    Ok(())
}

/// Resolves when a cgroup was made in a watched directory, not before
/// `not_before`; never without a watch.
async fn created(
    w: Option<&mut crate::arrivals::ArrivalWatch>,
    not_before: tokio::time::Instant,
) -> std::io::Result<()> {
    match w {
        Some(w) => {
            tokio::time::sleep_until(not_before).await;
            w.created().await
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A stop sent after [`Signals::block`] and before the listeners exist
    /// (the instant in which tokio alone drops it) is delivered once they
    /// do. Sent to this thread only, so no other test thread, where SIGTERM
    /// is not blocked, takes it.
    #[test]
    fn a_stop_sent_while_the_handlers_are_installed_is_kept() {
        std::thread::spawn(|| {
            let blocked = Signals::block().unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            nix::sys::signal::raise(NixSignal::SIGTERM).unwrap();
            rt.block_on(async {
                let mut s = Signals::install(blocked).unwrap();
                tokio::time::timeout(std::time::Duration::from_secs(10), s.term.recv())
                    .await
                    .expect("the SIGTERM sent before the listener existed was lost");
            });
        })
        .join()
        .unwrap();
    }

    /// `kernel.numa_balancing` follows the promotion mode in effect: the
    /// tiering bit off while tierd promotes, on while `promotion = "tierd"`
    /// falls back to the kernel's, and the config's value (or the host's)
    /// with `promotion = "kernel"`.
    #[test]
    fn numa_balancing_follows_the_promotion_in_effect() {
        let mut cfg = Config::parse("", Path::new("t.toml")).unwrap();
        let (k, t) = (PromotionMode::Kernel, PromotionMode::Tierd);
        assert_eq!(numa_balancing_for(&cfg, k), Some(2));
        cfg.daemon.numa_balancing = None;
        assert_eq!(numa_balancing_for(&cfg, k), None, "the host's value stays");
        cfg.daemon.promotion = t;
        assert_eq!(numa_balancing_for(&cfg, t), Some(0));
        assert_eq!(numa_balancing_for(&cfg, k), Some(2));
        cfg.daemon.numa_balancing = Some(2);
        assert_eq!(numa_balancing_for(&cfg, t), Some(0));
        assert_eq!(numa_balancing_for(&cfg, k), Some(2));
    }
}
