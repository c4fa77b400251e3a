//! The daemon: kernel settings, the tokio control loop, the HTTP endpoint and
//! systemd notification. `run` takes its shutdown signal as a future so tests
//! and the binary drive it alike (the mini-redis pattern).

use std::future::Future;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::config::{Config, PromotionMode};
use crate::controller::{Controller, Status};
use crate::metrics::Metrics;
use crate::sysctl::{KernelKnobs, DEMOTION_ENABLED, NUMA_BALANCING};

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Status>>,
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

/// Sets the host-wide knobs the config asks for. In observe-only mode nothing
/// is changed.
fn apply_knobs(cfg: &Config, knobs: &mut KernelKnobs) -> Result<()> {
    let d = &cfg.daemon;
    knobs.set(
        &d.sysfs_root.join(DEMOTION_ENABLED),
        if d.demotion_enabled { "1" } else { "0" },
    )?;
    let nb = match d.promotion {
        PromotionMode::Kernel => d.numa_balancing,
        // Regulated promotion: the kernel must not promote behind tierd's back.
        PromotionMode::Tierd => Some(d.numa_balancing.unwrap_or(0) & !2),
    };
    if let Some(nb) = nb {
        knobs.set(&d.procfs_root.join(NUMA_BALANCING), &nb.to_string())?;
    }
    Ok(())
}

/// Runs the daemon until `shutdown` resolves, then restores every kernel and
/// cgroup setting it changed.
///
/// Errors: the metrics address cannot be bound, sysfs cannot be read, or a
/// kernel knob cannot be set at start (all before the loop starts). Failures
/// inside a cycle are logged and counted (`tierd_loop_errors_total`); the loop
/// keeps running.
pub async fn run(cfg: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    let metrics = Arc::new(Metrics::new(cfg.daemon.promotion.as_str()));
    let status = Arc::new(Mutex::new(Status::default()));
    let mut controller = Controller::new(cfg.clone(), metrics.clone(), status.clone())?;

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
        .with_state(Shared {
            metrics: metrics.clone(),
            status,
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

    let mut knobs = KernelKnobs::default();
    if !controller.observe_only() {
        apply_knobs(&cfg, &mut knobs)?;
    }

    let mut ready = false;
    let mut watchdog_usec = 0u64;
    let watchdog = sd_notify::watchdog_enabled(false, &mut watchdog_usec);

    let mut ticker = tokio::time::interval(cfg.daemon.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticker.tick() => {}
        }
        // A cycle does blocking cgroupfs I/O (memory.reclaim can take seconds),
        // so it runs off the async workers; the controller moves there and back.
        let (c, res) = tokio::task::spawn_blocking(move || {
            let res = controller.cycle();
            (controller, res)
        })
        .await
        .context("control-loop cycle panicked")?;
        controller = c;
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
