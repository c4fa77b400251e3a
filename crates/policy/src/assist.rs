//! Promotion assist: tierd promotes for a container the kernel's promotion
//! has left under its target (issue 11, cold-hog).
//!
//! With `promotion = "kernel"` an under-target container gets its share
//! only through NUMA balancing, which promotes a lower-tier page at the
//! hint fault that follows its process's next scan pass. Passes over a
//! process come tens of seconds to a minute apart once its scan has backed
//! off (kernel/sched/fair.c `update_task_scan_period`, the per-VMA scan
//! delay and PID-activity filters of `task_numa_work`), so a newcomer's
//! hot pages left on the lower tier after one pass wait for the next one
//! while its share of DRAM is held by others (docs/NOTES.md "Promotion
//! assist"). After `assist_after_ms` under target − band with no page
//! promoted for it (by the kernel or tierd's recall), a container is
//! *assisted*: the daemon watches its processes with DAMON and promotes its
//! hot lower-tier regions itself, and the container claims room for the
//! hot bytes DAMON found there ([`ContainerSnapshot::lower_hot_bytes`]).
//! It stays assisted until it leaves the under-target state, or until
//! DAMON, once warmed up, finds nothing hot on its lower tier (then the
//! clock starts again: its lower-tier pages are cold, and watching them
//! costs a kdamond for nothing).
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use std::collections::BTreeMap;

use crate::model::{AssistState, ContainerId};

/// One container's input to [`observe`].
pub(crate) struct Progress {
    pub id: ContainerId,
    /// Under target − band this cycle (with lower-tier bytes to promote).
    pub under: bool,
    /// Bytes promoted for it since the last cycle (kernel and tierd).
    pub promoted_bytes: u64,
    /// DAMON's hot bytes on the lower tier, once warmed up (`None`: not
    /// watched, or not long enough).
    pub lower_hot_bytes: Option<u64>,
}

/// Records one cycle; returns whether each container (in input order) is
/// assisted. `after_ms` 0 turns the assist off. Containers absent from
/// `cs` are forgotten.
pub(crate) fn observe(
    st: &mut BTreeMap<ContainerId, AssistState>,
    now_ms: u64,
    cs: &[Progress],
    after_ms: u64,
) -> Vec<bool> {
    st.retain(|id, _| cs.iter().any(|c| c.id == *id && c.under));
    cs.iter()
        .map(|c| {
            if after_ms == 0 || !c.under {
                return false;
            }
            let s = st.entry(c.id).or_insert(AssistState {
                since_ms: now_ms,
                assisted: false,
            });
            if s.assisted {
                if c.lower_hot_bytes == Some(0) {
                    // Nothing hot down there: back off for another period.
                    s.assisted = false;
                    s.since_ms = now_ms;
                }
            } else if c.promoted_bytes > 0 {
                // The kernel (or recall) is still bringing it up.
                s.since_ms = now_ms;
            } else if now_ms.saturating_sub(s.since_ms) >= after_ms {
                s.assisted = true;
            }
            s.assisted
        })
        .collect()
}
