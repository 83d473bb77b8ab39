"""verl 0.9.1's fully_async Rollouter (kind ``verl-fully-async`` with ``request_routing``; its wheel,
read 2026-12-05: verl/experimental/fully_async_policy/fully_async_rollouter.py, set_max_required_samples,
_process_single_sample_streaming, _should_pause_generation).

The quota is the older Rollouter's (verl_async.py): per version at most (1 + staleness_threshold) x
trigger x require x mini prompts start, the count reset at each sync to the prompts in flight and
queued (staleness_samples). What changed: at most max_concurrent_samples = min(rollout servers x
concurrent_samples_per_replica, that quota) prompts are in flight at once, across the pool, and each
prompt's n trajectories go through the agent loop as requests of their own, each to the server with
the fewest requests in flight and back to the same one after an abort (the v1 kinds' load balancer,
verl_v1.FeedRollouter).

The kind registers in verl_async_dynamic.py, where every Rollouter of it is at hand.
"""
from __future__ import annotations

from .areal import ArealRollouter
from .verl_async import VerlFullyAsyncRun
from .verl_v1 import FeedRollouter


class RequestRoutedRollouter(FeedRollouter):
    """fully_async's Rollouter under verl 0.9.1's global cap, its requests routed one by one."""

    def capacity(self) -> int:
        """Prompts that may start now: the version's quota left, and the global cap's room."""
        quota = self.run_.quota
        return min(quota - self.started, min(self.serving() * self.cap, quota) - self.running)

    def serving(self) -> int:
        """The servers in the load balancer (_update_max_concurrent_samples counts them)."""
        return len(self.servers)

    def _group_done(self, accepted: bool) -> None:
        """A finished prompt leaves the in-flight count; a filtered one (DAPO) frees its quota place."""
        ArealRollouter._group_done(self, accepted)
        if not accepted:
            self.started -= 1

    def end_sync(self, version: int, now: float) -> None:
        """New weights: the version's count restarts at the prompts in flight (cut ones included) and
        queued, each counted once though its requests span servers."""
        self.started_per_version.append(self.started)
        self.version = version
        self.started = len(self.in_flight()) + len(self.queue)
        self.paused = False
        self._fire("wake")


class VerlFullyAsyncRequestRun(VerlFullyAsyncRun):
    ROLLOUTER = RequestRoutedRollouter

