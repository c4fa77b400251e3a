//! Plain data that crosses the policy boundary: [`Snapshot`] in, [`Plan`] out.
//!
//! The policy crate does no I/O and reads no clock: everything time-dependent
//! arrives as `elapsed_ms` in the snapshot, and everything carried between cycles
//! lives in [`PolicyState`].

/// Key of a container: the inode number of its cgroup v2 directory (the kernel's
/// cgroup id). A cgroup removed and recreated under the same path gets a new id,
/// so it never inherits state.
pub type ContainerId = u64;

/// A bound on a container's fast-tier bytes, as the operator wrote it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Share {
    /// An absolute amount of fast-tier memory, in bytes.
    Bytes(u64),
    /// A fraction (0.0..=1.0) of the container's total memory usage (all nodes).
    Fraction(f64),
}

impl Share {
    /// Resolves the share to bytes for a container using `usage_bytes` in total.
    pub fn resolve(self, usage_bytes: u64) -> u64 {
        match self {
            Share::Bytes(b) => b,
            Share::Fraction(f) => (usage_bytes as f64 * f.clamp(0.0, 1.0)) as u64,
        }
    }
}

/// A container's policy after config matching (see docs/DESIGN.md "Policy semantics").
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPolicy {
    /// Lower protection: the fast-tier bytes guaranteed while demand reaches it.
    pub local_low: Share,
    /// Upper bound on fast-tier bytes, whatever capacity is free.
    pub local_high: Share,
    /// Relative weight (≥ 1) in the water-filling of the shared fast tier.
    pub weight: u32,
    /// Pinned to the fast tier (Vistara opt-out): its fast-tier usage is taken
    /// out of the shared pool and it is never demoted.
    pub opt_out: bool,
    /// TMO-style offload of cold memory paced by memory pressure; `None`
    /// for none. An offloading container's demand is its warm set
    /// ([`ContainerSnapshot::warm_bytes`]), or what it holds on the fast
    /// tier while that is unknown: its cold pages make room for others at
    /// once, the offload paces the rest of its footprint.
    pub offload: Option<Offload>,
}

/// Offload of a container's cold memory, paced by its memory pressure
/// (Weiner et al., "TMO: Transparent Memory Offloading in Datacenters",
/// ASPLOS '22, and its userspace agent senpai): each interval reclaims a
/// step of the container's memory while PSI `some avg10` is below
/// `pressure_pct`, smaller as pressure nears it, none at or above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offload {
    /// Threshold of `memory.pressure` `some avg10`, percent (0 < p ≤ 100).
    pub pressure_pct: f64,
    /// Share of `memory.current` reclaimed per interval at zero pressure
    /// (0 < f ≤ 0.1).
    pub step_fraction: f64,
    /// Only pages untouched for about this long are taken (ms): demotion
    /// to a lower tier stalls no task, so pressure alone would not stop
    /// the offload short of the warm pages.
    pub min_age_ms: u64,
}

impl Offload {
    /// Bytes to reclaim this interval from a container using
    /// `current_bytes` (`memory.current`) under `pressure_pct` (`some
    /// avg10`): `current × step × (1 − pressure / threshold)`, senpai's
    /// rule; 0 at or above the threshold (back off) and for a pressure that
    /// is not a number.
    pub fn step_bytes(&self, current_bytes: u64, pressure_pct: f64) -> u64 {
        if pressure_pct.is_nan() || pressure_pct >= self.pressure_pct || self.pressure_pct <= 0.0 {
            return 0;
        }
        let scale = 1.0 - pressure_pct.max(0.0) / self.pressure_pct;
        (current_bytes as f64 * self.step_fraction.clamp(0.0, 1.0) * scale) as u64
    }
}

impl Default for ContainerPolicy {
    fn default() -> Self {
        ContainerPolicy {
            local_low: Share::Bytes(0),
            local_high: Share::Fraction(1.0),
            weight: 100,
            opt_out: false,
            offload: None,
        }
    }
}

/// One managed container as sampled this cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSnapshot {
    pub id: ContainerId,
    /// cgroup path relative to the cgroup2 root, for logs only.
    pub name: String,
    /// Bytes (anon + file) on fast-tier nodes, from `memory.numa_stat`.
    pub fast_bytes: u64,
    /// Bytes (anon + file) on lower-tier nodes, from `memory.numa_stat`.
    pub slow_bytes: u64,
    /// Hot-set bytes across all tiers when a hotness source knows them;
    /// `None` means demand falls back to usage (`fast_bytes + slow_bytes`).
    pub hot_bytes: Option<u64>,
    pub policy: ContainerPolicy,
    /// Bytes the container's pages crossed tiers since the previous snapshot
    /// (input to thrash detection; all zero when unknown).
    pub migrations: Migrations,
    /// Bytes of the container's pages known to be hot (the kernel promoted
    /// them before) that the daemon last found on the lower tier, e.g.
    /// after kswapd demoted them to make room for another container's
    /// promotions. The daemon can promote them back at once, so an
    /// under-target container claims room for them as one that grows does
    /// (0 when unknown or not checked).
    pub recallable_bytes: u64,
    /// DAMON's hot bytes on the lower tier while the container is assisted
    /// ([`ContainerPlan::assisted`]) and DAMON has watched it long enough
    /// to tell hot regions from cold; `None` otherwise. An assisted
    /// container claims room for them (see [`Plan::need_bytes`]).
    pub lower_hot_bytes: Option<u64>,
    /// NUMA hint faults on the container's lower-tier pages since the
    /// previous snapshot (the eBPF probe counts them by the node of the
    /// page); `None` when the source cannot tell nodes apart (the
    /// memory.stat counters). Evidence that its lower tier is in use: an
    /// under-target container is assisted only with it (see
    /// [`crate::assist`]).
    pub lower_hint_faults: Option<u64>,
    /// Bytes of the container's pages that passed a page-granular hot test
    /// (the kernel promoted or refused them, or their NUMA hint fault came
    /// within the daemon's hot latency of the scan that unmapped them) and
    /// were last seen on the lower tier; 0 when unknown. A container at its
    /// target swaps them in for its idle fast-tier pages (see
    /// [`ContainerPlan::swap_bytes`]).
    pub known_hot_below_bytes: u64,
    /// What the container's swap of the previous cycle (hot or
    /// within-share, [`ContainerPlan::swap_bytes`]) found idle on the fast
    /// tier, bytes: every page that passed its idle test, whether the swap
    /// took it or not (its supply, not what it asked); `None` when it did
    /// not swap then (or the swap failed). Swaps that find next to nothing
    /// idle trade a hot page for a hot one:
    /// [`PolicyParams::hot_swap_stop_after`] of them in a row end its hot
    /// swaps until the next arrival or exit.
    pub swap_idle_bytes: Option<u64>,
    /// Bytes of the container's pages that reclaim demoted since the
    /// previous snapshot after ageing them, so in LRU order by recent use:
    /// the daemon's own `memory.reclaim` writes and lru_gen evictions (the
    /// growth of `pgdemote_direct` + `pgdemote_proactive` in its
    /// memory.stat, pages times the page size; the counters' whole count on
    /// the first snapshot of a container). kswapd's demotions are left out:
    /// they take a newcomer's pages in the order it allocated them while it
    /// fills. Input to the hot swap's bound
    /// ([`HotSwapState::ranked_below`]); 0 when unknown.
    pub aged_demoted_bytes: u64,
    /// For a container whose policy has `offload`: its bytes on every node
    /// in MGLRU generations younger than the offload's `min_age` (pages
    /// touched about that recently: its warm set), read while those
    /// generations are fresh; `None` when unknown (no lru_gen, not aged
    /// recently) and for other containers.
    pub warm_bytes: Option<u64>,
}

/// Tier crossings of one container since the previous snapshot, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Migrations {
    /// Fast → lower tier by the control plane's own decisions (tierd's
    /// movers and memory.reclaim requests); the daemon leaves kswapd's
    /// demotions out (see docs/NOTES.md, "What counts as ping-pong").
    pub demoted_bytes: u64,
    /// Lower → fast tier: NUMA-balancing promotion and tierd's own movers.
    pub promoted_bytes: u64,
    /// Promoted bytes that tierd's own records show it had demoted within the
    /// thrash window (exact ping-pong; 0 where no records are kept).
    pub pingpong_bytes: u64,
}

impl ContainerSnapshot {
    /// Total usage on all nodes, in bytes.
    pub fn usage_bytes(&self) -> u64 {
        self.fast_bytes + self.slow_bytes
    }
}

/// Everything the solver needs to know about the host this cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Total capacity of the fast-tier nodes (MemTotal summed), in bytes.
    pub fast_capacity_bytes: u64,
    /// Fast-tier bytes used by everything that is not a managed container
    /// (kernel, page cache of unmanaged cgroups, daemons): capacity minus this
    /// minus headroom is what the containers share.
    pub fast_unmanaged_bytes: u64,
    /// Milliseconds since the previous snapshot (0 on the first), for refilling
    /// the token buckets.
    pub elapsed_ms: u64,
    pub containers: Vec<ContainerSnapshot>,
    /// Bytes of the base pages whose lower-tier hint fault passed the
    /// kernel's hot-page latency test since the previous snapshot,
    /// rate-limited or not (the growth of `pgpromote_candidate` in
    /// /proc/vmstat, pages summed over nodes, times the page size;
    /// kernel/sched/fair.c `numa_promotion_rate_limit`). `None` where the
    /// kernel has no such counter (before 5.18) or it could not be read:
    /// the policy then never closes the kernel's promotion
    /// ([`PromoteGate`]).
    pub hot_below_bytes: Option<u64>,
}

/// What a container's demand (the bytes it competes for in the
/// water-filling) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DemandSource {
    /// Its usage on all nodes. Targets then move only with usage, weights
    /// and the pool, never with sampling noise, and their sum is
    /// min(pool, Σ min(usage, local_high)): the split of the fast tier is
    /// the policy's, and *which* pages fill each share is left to the
    /// kernel's page-granular signals (LRU age for demotion by
    /// `memory.reclaim`, NUMA hint faults for promotion). The default: a
    /// short-window hot set of a skewed-popularity tenant is small and
    /// unstable, and targets that follow it move pages back and forth
    /// (docs/NOTES.md "Demand is usage").
    #[default]
    Usage,
    /// Its hot set where a hotness source knows it (`hot_bytes`), else its
    /// usage; what the hot sets leave of the pool is water-filled again up
    /// to usage.
    HotSet,
}

/// Tunables of the solver, from the daemon config.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyParams {
    /// Demand of each container: usage (default) or its hot set.
    pub demand: DemandSource,
    /// Fast-tier bytes kept free for new allocations and promotions.
    pub headroom_bytes: u64,
    /// Hysteresis band: demote only above target + band, promote only below
    /// target − band. Band = max(band_min_bytes, band_fraction × target).
    pub band_fraction: f64,
    pub band_min_bytes: u64,
    /// Per-container demotion rate limit (token bucket refill), bytes/s.
    pub container_demote_bytes_per_s: u64,
    /// Host-wide demotion rate limit, bytes/s.
    pub global_demote_bytes_per_s: u64,
    /// Per-container and host-wide promotion budgets, bytes/s.
    pub container_promote_bytes_per_s: u64,
    pub global_promote_bytes_per_s: u64,
    /// Token bucket depth, in seconds of refill.
    pub burst_s: f64,
    /// Ping-pong detection and damping.
    pub thrash: ThrashParams,
    /// When tierd promotes, an under-target container claims this much
    /// time of its promotion budget as room, in ms (see
    /// [`Plan::need_bytes`]).
    pub need_window_ms: u64,
    /// Whether tierd promotes (`promotion = "tierd"`): it promotes only
    /// into free room above the headroom, so an under-target container
    /// claims a window of its promotion budget. With the kernel's
    /// promotion (false) the headroom is its room: NUMA balancing promotes
    /// into it and, short of free pages, wakes kswapd, which demotes
    /// unprotected pages (mm/migrate.c `migrate_misplaced_folio_prepare`).
    pub tierd_promotes: bool,
    /// How long no container may be under its target (and none arrive or
    /// leave) before the plan is steady, in ms (see [`Plan::steady`]).
    pub steady_ms: u64,
    /// While steady, the kernel's promotion is closed ([`PromoteGate::Closed`])
    /// until hot pages show on the lower tier faster than this, bytes per
    /// second of [`Snapshot::hot_below_bytes`]; then it is limited
    /// ([`PromoteGate::Limited`]) for [`PolicyParams::steady_ms`] and closed
    /// again. 0: never closed (limited for as long as the plan is steady).
    pub hot_below_bytes_per_s: u64,
    /// With the kernel's promotion: for how long after a container arrives
    /// the daemon shortens NUMA balancing's scan period while it is under
    /// its target − band ([`Plan::scan_paced`]), in ms; 0: never.
    pub scan_pace_ms: u64,
    /// With the kernel's promotion: how long a container may stay under its
    /// target − band with nothing promoted for it before tierd promotes for
    /// it ([`ContainerPlan::assisted`]), in ms; 0 turns the assist off.
    /// Ignored when tierd promotes.
    pub assist_after_ms: u64,
    /// Inside-band trade ([`ContainerPlan::band_trade`]); off by default:
    /// in the demo it evened identical tenants out but was not ahead of the
    /// plain band everywhere (docs/NOTES.md "The inside-band trade").
    pub band_trade: bool,
    /// Hot swap ([`ContainerPlan::swap_bytes`] for a container that is not
    /// assisted): a container at its target trades its idle fast-tier pages
    /// for its known-hot lower-tier pages. On by default since session 79:
    /// in the whole demo, two repeats on 6.12 and 7.3, it was behind kernel
    /// tiering on fewer rows than without it (docs/NOTES.md "Session 79").
    pub hot_swap: bool,
    /// The hot swap runs only this long after an arrival or exit (the
    /// daemon's first cycle counts as one), in ms; 0: always. What it
    /// repairs is made when the set of containers changes (`hotswap.rs`).
    pub hot_swap_window_ms: u64,
    /// How long past the close of `hot_swap_window_ms` a container that
    /// was quiet at the close (no swap in its last
    /// [`crate::HOT_SWAP_QUIET_MS`]) may still swap, ms, until its first run
    /// of swaps after the close ends; 0: no extension. NUMA balancing's
    /// scan of a settled newcomer can come a minute later
    /// (`hotswap::container_open`).
    pub hot_swap_extension_ms: u64,
    /// After this many hot swaps in a row that each found idle on its fast
    /// tier less than a quarter of the container's band or
    /// [`crate::HOT_SWAP_MIN_IDLE_FRACTION`] of what it holds there
    /// ([`ContainerSnapshot::swap_idle_bytes`]), the container swaps no more
    /// until the next arrival or exit: every page it holds there was
    /// touched since the last aging, so each further swap is an aging (a
    /// walk of its page tables) that trades hot pages for hot ones
    /// (`hotswap.rs`). 0: never stop.
    pub hot_swap_stop_after: u32,
    /// Arrival assist (`assist.rs`): within `hot_swap_window_ms` of an
    /// arrival or exit, a container inside its band but a quarter band or
    /// more under its target is assisted like one under its target − band
    /// (after `assist_after_ms` with nothing promoted for it, its lower tier
    /// in use), so that its within-share swap trades the idle pages it
    /// holds for its hot lower-tier regions.
    pub arrival_assist: bool,
    /// Arrival window (`membership.rs`, [`Plan::filling`]): for this long
    /// after a container arrives, while its usage still grows by more than
    /// `band_min_bytes` a cycle, the containers already there that hold
    /// more of the fast tier than they would keep were it grown to its
    /// share are not protected (`memory.low` 0), so the kernel's reclaim
    /// demotes them to make room for its allocation instead of sending the
    /// allocation to the lower tier; in ms, 0: off. It demotes nothing by
    /// itself: targets and budgets do not change.
    pub arrival_window_ms: u64,
    /// Arrival lookahead: while a container fills its share
    /// ([`Plan::filling`]) and is under its target, it also claims room for
    /// its next cycle's allocation: its usage's growth since the last cycle,
    /// up to its target ([`Plan::need_bytes`]). Its allocation otherwise
    /// eats the headroom within a cycle and spills to the lower tier, to be
    /// promoted back page by page while the incumbents are demoted anyway.
    /// On by default.
    pub arrival_lookahead: bool,
    /// `memory.min` for a protected container while another holds more
    /// than its target unprotected and none fills its share
    /// ([`ContainerPlan::memory_min_bytes`]): kswapd then takes that excess,
    /// not pages the protected container would promote back. Its cost: with
    /// the excess all hot, kswapd finds nothing and the kernel gives the
    /// fast node up (`node_unreclaimable`) while tierd runs. On by default.
    pub share_min: bool,
    /// The least time between the two agings of a demotion through the
    /// multi-gen LRU (`cgroupctl::LruGen::demote`), in ms, while no
    /// container is filling its share ([`ContainerPlan::aging_gap_ms`]; 0: back to
    /// back always). A cache whose pages all sit in its two youngest
    /// generations gives up what was untouched between the two page-table
    /// walks: back to back that window is a walk's length (~0.1 s under
    /// emulation) and a demo tenant leaves the edge of its hottest tenth
    /// untouched in it about half the time; 0.5 s apart, 3 % of the time
    /// (docs/NOTES.md "Session 76"). Default 500.
    pub aging_gap_ms: u64,
    /// After this many cycles in a row whose demotion of a container took
    /// next to nothing under the gap (its fast-tier bytes fell by less than
    /// a quarter of what was asked: a cache touching every DRAM page within
    /// the gap), the container's agings run back to back until it is back
    /// within its band (`gap.rs`, [`ContainerPlan::aging_gap_ms`]). 0:
    /// never. Default 3.
    pub aging_gap_lift_after: u32,
}

/// Thrash control (docs/DESIGN.md rule 4). Ping-pong is estimated per container
/// over a sliding window as `max(pingpong_bytes, min(demoted, promoted))`:
/// bytes that went down and came back up. Above `pingpong_bytes_per_s` the
/// container's damping level rises by one (at most once per half window, up
/// to `max_level`); each level halves its promotion budget and doubles the
/// promotion side of its hysteresis band (Equilibria halves the promotion rate of a thrashing
/// cgroup; its scan-rate floor is 1/16, hence `max_level` 4). The level falls
/// by one after the rate has stayed below half the threshold for `settle_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct ThrashParams {
    pub window_ms: u64,
    pub pingpong_bytes_per_s: u64,
    pub settle_ms: u64,
    pub max_level: u32,
}

impl Default for ThrashParams {
    fn default() -> Self {
        ThrashParams {
            window_ms: 30_000,
            pingpong_bytes_per_s: 1 << 20,
            settle_ms: 30_000,
            max_level: 4,
        }
    }
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams {
            demand: DemandSource::Usage,
            headroom_bytes: 64 << 20,
            band_fraction: 0.05,
            band_min_bytes: 16 << 20,
            container_demote_bytes_per_s: 64 << 20,
            global_demote_bytes_per_s: 256 << 20,
            container_promote_bytes_per_s: 64 << 20,
            global_promote_bytes_per_s: 256 << 20,
            burst_s: 2.0,
            thrash: ThrashParams::default(),
            need_window_ms: 10_000,
            tierd_promotes: false,
            steady_ms: 10_000,
            hot_below_bytes_per_s: 256 << 10,
            scan_pace_ms: 30_000,
            assist_after_ms: 10_000,
            band_trade: false,
            hot_swap: true,
            hot_swap_window_ms: 60_000,
            hot_swap_extension_ms: 60_000,
            hot_swap_stop_after: 3,
            arrival_assist: false,
            arrival_window_ms: 30_000,
            arrival_lookahead: true,
            share_min: true,
            aging_gap_ms: 500,
            aging_gap_lift_after: 3,
        }
    }
}

/// Where a container stands against its target after this cycle's solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementState {
    /// opt_out: pinned to the fast tier, outside the shared pool.
    Pinned,
    /// Fast-tier bytes above target + band: to be demoted.
    OverTarget,
    /// Fast-tier bytes below target − band: may be promoted.
    UnderTarget,
    /// Within the hysteresis band: no pages move.
    AtTarget,
}

/// The solver's decision for one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    pub id: ContainerId,
    /// Demand used this cycle (hot bytes, or usage), in bytes.
    pub demand_bytes: u64,
    /// Resolved local_low and local_high, in bytes.
    pub local_low_bytes: u64,
    pub local_high_bytes: u64,
    /// Guaranteed fast-tier bytes: min(demand, local_low), scaled down when
    /// the guarantees exceed capacity.
    pub guarantee_bytes: u64,
    /// Fast-tier target, in bytes.
    pub target_bytes: u64,
    /// Bytes to demote this cycle (after band, need and rate limits); 0 if
    /// none. Demotion is work-conserving: beyond what exceeds `local_high`,
    /// over-target containers together lose at most what the fast tier
    /// needs this cycle (see [`Plan::need_bytes`]).
    pub demote_bytes: u64,
    /// Promotion budget this cycle (after band and rate limits); 0 if none.
    pub promote_bytes: u64,
    /// Protection by `memory.low`, in bytes: the container's usage (full
    /// protection from kswapd demotion; the daemon writes it as `max`, since
    /// the kernel compares with `memory.current`, which also counts kernel
    /// memory) while its fast-tier bytes are at most its target, and for
    /// pinned containers; 0 once it holds more than its target, so kswapd
    /// demotes from those first.
    pub memory_low_bytes: u64,
    /// Protection by `memory.min`, in bytes (written as `max` when not 0,
    /// like `memory_low_bytes`): its usage whenever `memory.low` protects
    /// it (at or under its target) and either it has a `local_low`
    /// guarantee or, while no container fills its share
    /// ([`Plan::filling`]), another container that is not pinned holds more
    /// than its target unprotected (`memory.low` 0); else 0. With the multi-gen
    /// LRU (6.1+, Debian's default) `memory.low` only orders reclaim:
    /// `shrink_one` in mm/vmscan.c moves a memcg below its low to the tail
    /// once, then reclaims it anyway, so kswapd demotes protected
    /// containers below their `local_low`, or below their share while a
    /// neighbour's promotions wake it, pages they then promote back;
    /// `memory.min` is never reclaimed (`mem_cgroup_below_min`), so kswapd
    /// takes the excess. Only while there is an excess, and not during an
    /// arrival (the incumbents' pages are all young then): with every
    /// container protected by `memory.min` and the rest all young, kswapd
    /// finds nothing, and after 16 tries the kernel gives the fast node up
    /// (`node_unreclaimable`; seen in the emulated host with the rule
    /// applied during an arrival). Like `memory.low` it covers total usage,
    /// which is why it is the whole usage; it lapses as soon as the
    /// container holds more than its target.
    pub memory_min_bytes: u64,
    /// Of this cycle's `promote_bytes`, what the `local_low` guarantee
    /// lacks on the fast tier (min(guarantee − fast, promote_bytes), 0 for
    /// a pinned container): tierd promotes it itself in every promotion
    /// mode, because the kernel's NUMA balancing promotes only pages whose
    /// hint faults look hot, and a guarantee is a promise of bytes.
    pub guarantee_promote_bytes: u64,
    pub state: PlacementState,
    /// Thrash damping level (0 = none): promotion budget ÷ 2^level, the
    /// promotion side of the band × 2^level (the demotion side is unchanged:
    /// a thrashing container above its target is still demoted); movers also
    /// lengthen the minimum idle age before demotion.
    pub damping_level: u32,
    /// Ping-pong estimate over the thrash window, bytes/s.
    pub pingpong_bytes_per_s: u64,
    /// Promotion assist (`assist.rs`): under its target − band with nothing
    /// promoted for it for [`PolicyParams::assist_after_ms`] while the
    /// kernel promotes; the daemon watches its processes with DAMON and
    /// promotes its hot lower-tier regions within `promote_bytes`. It stays
    /// assisted at its target while DAMON still finds hot bytes on its
    /// lower tier (see `swap_bytes`).
    pub assisted: bool,
    /// Within-share swap, bytes (part of both `demote_bytes` and
    /// `promote_bytes`): an assisted container at its target whose hot
    /// lower-tier regions are at least a quarter of its band demotes that
    /// many bytes of its own oldest fast-tier pages (the multi-gen LRU's
    /// oldest generation) and promotes its hot lower-tier regions into the
    /// room. Its share stays the same; which of its pages hold it changes
    /// (a newcomer's never-touched first pages, kept on DRAM by its own
    /// protection, make way for its hot set; docs/NOTES.md "Within-share
    /// swap").
    ///
    /// Hot swap (with [`PolicyParams::hot_swap`]), the same for a container
    /// that is not assisted: at its target (damped or not), within
    /// [`PolicyParams::hot_swap_window_ms`] of an arrival or exit (or
    /// [`PolicyParams::hot_swap_extension_ms`] more, for one quiet at the
    /// window's close) and at most
    /// once every [`crate::HOT_SWAP_PERIOD_MS`], with at least a
    /// quarter band of known-hot pages on the lower tier
    /// ([`ContainerSnapshot::known_hot_below_bytes`]), it demotes as many
    /// of its idle fast-tier pages (the daemon's `limits.hot_swap_idle`:
    /// untouched for 500 ms by default, or with it 0 for
    /// [`crate::HOT_SWAP_MIN_AGE_MS`]) and the daemon's recall moves those
    /// pages into the room. It repairs
    /// what a fast demotion got wrong: a container cut to its share in a
    /// few seconds loses hot pages with the cold, and in a steady state the
    /// kernel no longer promotes them (docs/NOTES.md "Hot swap").
    pub swap_bytes: u64,
    /// Inside-band trade (only with [`PolicyParams::band_trade`], off by
    /// default): the container is inside its band but at least a
    /// quarter band below its target, and has known-hot (or declined) pages
    /// on the lower tier (`recallable_bytes`). It claims room for those
    /// pages up to its target, and the containers at least a quarter band
    /// above their targets give up their bytes above target for it (cut to
    /// the need, like any demotion below `local_high`). Without it two
    /// identical tenants can sit at opposite edges of their bands for good,
    /// one short of its hottest pages (docs/NOTES.md "The inside-band trade").
    pub band_trade: bool,
    /// The least time between the two agings of this container's demotion
    /// this cycle, ms: [`PolicyParams::aging_gap_ms`], but 0 while a
    /// newcomer fills its share ([`Plan::filling`]) and while the
    /// container's demotion under the gap takes next to nothing (a cache
    /// touching all its DRAM pages within the gap; `gap.rs`) until it is
    /// back within its band.
    pub aging_gap_ms: u64,
}

impl ContainerPlan {
    /// Container `id` in `state`, every byte count, rate and level 0, not
    /// assisted, not trading: what the solver starts from and fills in.
    pub fn new(id: ContainerId, state: PlacementState) -> Self {
        ContainerPlan {
            id,
            demand_bytes: 0,
            local_low_bytes: 0,
            local_high_bytes: 0,
            guarantee_bytes: 0,
            target_bytes: 0,
            demote_bytes: 0,
            promote_bytes: 0,
            memory_low_bytes: 0,
            memory_min_bytes: 0,
            guarantee_promote_bytes: 0,
            damping_level: 0,
            pingpong_bytes_per_s: 0,
            swap_bytes: 0,
            band_trade: false,
            aging_gap_ms: 0,
            state,
            assisted: false,
        }
    }

    /// Whether the container may fall short of its target before the next
    /// plan: not pinned, and not above target + band. Only such a container
    /// recalls pages to the fast tier (recall serves a container holding
    /// less than its target), so only its lower-tier pages whose hint
    /// faults the kernel declined are worth recording; a container above
    /// its band loses pages until the band, whatever its faults.
    pub fn may_fall_short(&self) -> bool {
        matches!(
            self.state,
            PlacementState::UnderTarget | PlacementState::AtTarget
        )
    }
}

/// The solver's output for one cycle.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Fast-tier bytes shared among non-pinned containers this cycle.
    pub pool_bytes: u64,
    /// True when the guarantees alone exceeded the pool and were scaled down.
    pub guarantees_scaled: bool,
    /// Fast-tier room needed this cycle, in bytes: headroom + claims −
    /// free (free = capacity − unmanaged − managed fast-tier bytes; at
    /// least 0). Each under-target container claims, up to min(target −
    /// fast, its lower-tier bytes), the largest of what its `local_low`
    /// guarantee lacks, its recallable bytes, when it is assisted the hot
    /// bytes DAMON found on its lower tier, and, when tierd promotes
    /// ([`PolicyParams::tierd_promotes`]), [`PolicyParams::need_window_ms`]
    /// of its promotion budget; a container trading inside its band
    /// ([`ContainerPlan::band_trade`]) claims its recallable bytes up to
    /// its target; with [`PolicyParams::arrival_lookahead`] a container
    /// filling its share and under its target claims its usage's growth
    /// since the last cycle, up to its target. Demotion below `local_high`
    /// never exceeds
    /// it: a byte is demoted only when an under-target container or the
    /// headroom needs the room, and free room is not made twice. With the
    /// kernel's promotion the headroom is the room promotions use (and
    /// kswapd makes more when it runs short): room made ahead of a
    /// promotion that stalls would stay empty.
    pub need_bytes: u64,
    /// One entry per container of the snapshot; [`crate::solve`] sorts them
    /// by id.
    pub containers: Vec<ContainerPlan>,
    /// No container under its target − band (the damped band included), and
    /// the same containers, for [`PolicyParams::steady_ms`]: nothing is
    /// owed to anyone, so a promotion only swaps pages within the split
    /// (see `steady.rs`; the daemon then limits the kernel's promotion
    /// rate).
    pub steady: bool,
    /// What the daemon holds the kernel's promotion rate limit at this
    /// cycle (see `steady.rs`).
    pub promote_gate: PromoteGate,
    /// A container that arrived less than [`PolicyParams::scan_pace_ms`]
    /// ago is under its target − band: the daemon
    /// caps NUMA balancing's scan period, so the kernel keeps taking hint
    /// faults on, and promoting, its lower-tier pages (in tiering mode the
    /// kernel lengthens a task's period after every scan, up to a minute:
    /// `update_task_scan_period`, kernel/sched/fair.c). Arrivals only, and
    /// bounded in time: a container can stay under its target with a cold
    /// lower tier (a skewed tenant's tail) where faster scans find nothing,
    /// and one pushed under later by promotion churn gets more churn.
    pub scan_paced: bool,
    /// Containers filling their share after an arrival
    /// ([`PolicyParams::arrival_window_ms`]), in id order: arrived within
    /// the window, and seen for the first time or grown by more than
    /// `band_min_bytes` since the last cycle. While one is, the others above
    /// the fast-tier bytes they would keep were it grown to its share (its
    /// `local_high`, the weights deciding) get `memory.low` 0: the kernel's
    /// reclaim, woken by the newcomer's allocation, demotes them and the
    /// allocation stays on the fast tier. The daemon's first cycle has no
    /// incumbents, so it drops nothing. The daemon runs its cycle every
    /// quarter interval while one is filling, each demoting (to the
    /// headroom, as [`Plan::need_bytes`] says) what the allocation took.
    pub filling: Vec<ContainerId>,
    /// The hot swap's window is open for some container
    /// ([`PolicyParams::hot_swap_window_ms`],
    /// [`PolicyParams::hot_swap_extension_ms`]); false when
    /// [`PolicyParams::hot_swap`] is off. While it is closed the daemon need
    /// not count known-hot pages below for the next cycle.
    pub hot_swap_open: bool,
}

impl Plan {
    /// The plan of container `id`, if it was in the snapshot.
    ///
    /// O(log n) on a plan from [`crate::solve`] (sorted by id); a plan built
    /// by hand in another order is still answered correctly, by a linear scan.
    pub fn get(&self, id: ContainerId) -> Option<&ContainerPlan> {
        match self.containers.binary_search_by_key(&id, |p| p.id) {
            Ok(i) => Some(&self.containers[i]),
            Err(_) => self.containers.iter().find(|p| p.id == id),
        }
    }
}

/// State carried from one solve to the next (token buckets), keyed by id.
/// Containers absent from a snapshot are dropped from the state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyState {
    pub demote_tokens: std::collections::BTreeMap<ContainerId, f64>,
    pub promote_tokens: std::collections::BTreeMap<ContainerId, f64>,
    pub global_demote_tokens: f64,
    pub global_promote_tokens: f64,
    /// Sum of `elapsed_ms` over all snapshots: the policy's own clock.
    pub clock_ms: u64,
    pub thrash: std::collections::BTreeMap<ContainerId, ThrashState>,
    /// The containers of the last cycle and when each arrived (see
    /// `membership.rs`): the steady-state detector, the scan pacing and the
    /// hot swap's window all read it.
    pub members: Membership,
    pub steady: SteadyState,
    /// Promotion assist per under-target container (see `assist.rs`).
    pub assist: std::collections::BTreeMap<ContainerId, AssistState>,
    /// When the hot swap may run (see `hotswap.rs`).
    pub hot_swap: HotSwapState,
    /// Whose demotion is slow under the aging gap (see `gap.rs`).
    pub aging_gap: AgingGapState,
}

/// The containers of the last cycle, recorded once per solve.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Membership {
    /// The containers of the last cycle (the keys, in id order) and when
    /// (policy clock) each was first seen (see [`Plan::scan_paced`]); a
    /// container that leaves and comes back arrives again.
    pub arrived_ms: std::collections::BTreeMap<ContainerId, u64>,
    /// When (policy clock) the set of containers last changed: an arrival
    /// or an exit. `None` until a cycle has seen a container.
    pub changed_ms: Option<u64>,
    /// Each container's usage (fast + lower tier, bytes) at the last cycle:
    /// whether a newcomer is still growing ([`Plan::filling`]).
    pub usage_bytes: std::collections::BTreeMap<ContainerId, u64>,
}

/// Hot-swap pacing state (see [`PolicyParams::hot_swap_window_ms`] and
/// [`crate::HOT_SWAP_PERIOD_MS`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HotSwapState {
    /// When each container last swapped (policy clock).
    pub last_ms: std::collections::BTreeMap<ContainerId, u64>,
    /// Each container's swaps in a row that found less than a quarter band
    /// idle, since the last arrival or exit
    /// ([`PolicyParams::hot_swap_stop_after`]).
    pub fruitless: std::collections::BTreeMap<ContainerId, u32>,
    /// Each container's lower-tier bytes that got there by aged reclaim
    /// ([`ContainerSnapshot::aged_demoted_bytes`] summed, never more than
    /// its lower-tier bytes): its coldest pages by its own LRU, which no
    /// hot swap trades for (`hotswap::unranked_below`).
    pub ranked_below: std::collections::BTreeMap<ContainerId, u64>,
}

/// What the aging gap's rule (`gap.rs`, [`ContainerPlan::aging_gap_ms`])
/// remembers of each container.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgingGapState {
    pub containers: std::collections::BTreeMap<ContainerId, AgingGapTrack>,
}

/// One container's record for the aging gap's rule.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AgingGapTrack {
    /// Its fast-tier bytes at the last cycle.
    pub fast_bytes: u64,
    /// The demotion asked of it at the last cycle, bytes (the hot swap's
    /// half left out; an ask too small to be written counts as 0).
    pub asked_bytes: u64,
    /// Cycles in a row whose demotion took next to nothing.
    pub slow: u32,
}

/// Promotion-assist state of one under-target container.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistState {
    /// Since when (policy clock) nothing was promoted for it, or since its
    /// last assist found nothing hot on the lower tier.
    pub since_ms: u64,
    pub assisted: bool,
    /// Consecutive cycles at its target in which less than a quarter of its
    /// band was promoted for it: the within-share swap ends after
    /// `assist::SWAP_IDLE_CYCLES` of them.
    pub idle_swaps: u32,
    /// Assists in a row that found nothing hot on its lower tier (reset
    /// when something is promoted for it): each one doubles the wait
    /// before the next, up to [`crate::assist::MAX_COLD_BACKOFF`] doublings.
    pub cold_ends: u32,
    /// Hint faults on its lower-tier pages since it went under its target
    /// (or since its last assist found nothing hot there).
    pub lower_faults: u64,
}

/// Steady-state detector state (see [`Plan::steady`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SteadyState {
    /// Since when no container has been under its target (policy clock).
    pub since_ms: Option<u64>,
    /// The gate of the last cycle, and until when (policy clock) hot pages
    /// seen on the lower tier keep it [`PromoteGate::Limited`].
    pub gate: PromoteGate,
    pub limited_until_ms: Option<u64>,
}

/// The kernel's promotion (`kernel.numa_balancing_promote_rate_limit_MBps`)
/// as the daemon holds it in a cycle; with `promotion = "kernel"` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromoteGate {
    /// The kernel's (or the operator's) own limit: a container is owed
    /// fast-tier bytes, or the plan has not been steady for long enough.
    #[default]
    Open,
    /// Steady, and hot pages showed on the lower tier lately: held at
    /// `limits.steady_promote_rate`, which lets the hottest candidates
    /// through (they fault first after a scan) and declines the rest.
    Limited,
    /// Steady, and the lower tier holds nothing hot: held at 0. A
    /// promotion would only swap a warm page in for one kswapd demotes, and
    /// each promotion that finds the node short of free pages wakes kswapd,
    /// which demotes more than was promoted (docs/NOTES.md "Who moves what
    /// in a steady state").
    Closed,
}

/// Per-container thrash detector state (see [`ThrashParams`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ThrashState {
    /// (clock_ms, demoted, promoted, pingpong) per snapshot inside the window.
    pub samples: std::collections::VecDeque<(u64, u64, u64, u64)>,
    pub level: u32,
    /// Clock of the last level increase.
    pub raised_ms: Option<u64>,
    /// Since when the rate has stayed below half the threshold.
    pub calm_since_ms: Option<u64>,
}
