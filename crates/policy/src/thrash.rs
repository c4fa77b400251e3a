//! Ping-pong detection and damping (docs/DESIGN.md "Policy semantics", rule 4).
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`), inputs are the
//! per-snapshot [`Migrations`] of a container.

use crate::model::{Migrations, ThrashParams, ThrashState};

/// Records one snapshot's migrations at `now_ms` and updates the damping
/// level. Returns `(level, ping-pong bytes/s over the window)`.
///
/// The window estimate is `max(Σ pingpong, min(Σ demoted, Σ promoted))`:
/// tierd's own records are exact where it keeps them, and the memcg counters
/// bound ping-pong from above by the smaller of the two directions (pages
/// cannot come back up more often than they went down, and vice versa).
pub(crate) fn observe(
    st: &mut ThrashState,
    now_ms: u64,
    m: Migrations,
    p: &ThrashParams,
) -> (u32, u64) {
    let window_ms = p.window_ms.max(1);
    st.samples
        .push_back((now_ms, m.demoted_bytes, m.promoted_bytes, m.pingpong_bytes));
    while let Some(&(t, ..)) = st.samples.front() {
        if now_ms.saturating_sub(t) >= window_ms {
            st.samples.pop_front();
        } else {
            break;
        }
    }
    let (mut down, mut up, mut exact) = (0u64, 0u64, 0u64);
    for &(_, d, u, x) in &st.samples {
        down = down.saturating_add(d);
        up = up.saturating_add(u);
        exact = exact.saturating_add(x);
    }
    let pingpong = exact.max(down.min(up));
    let rate = (u128::from(pingpong) * 1000 / u128::from(window_ms)) as u64;

    if rate > p.pingpong_bytes_per_s {
        st.calm_since_ms = None;
        let may_raise = st
            .raised_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= window_ms / 2);
        if may_raise && st.level < p.max_level {
            st.level += 1;
            st.raised_ms = Some(now_ms);
        }
    } else if rate <= p.pingpong_bytes_per_s / 2 {
        match st.calm_since_ms {
            None => st.calm_since_ms = Some(now_ms),
            Some(t) if st.level > 0 && now_ms.saturating_sub(t) >= p.settle_ms => {
                st.level -= 1;
                st.calm_since_ms = Some(now_ms);
            }
            Some(_) => {}
        }
    } else {
        st.calm_since_ms = None;
    }
    (st.level, rate)
}
