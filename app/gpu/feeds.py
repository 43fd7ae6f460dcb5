"""One host's GPU readings as two readers last gave them, and what the views show of them.

The SSH probe gives memory and processes; a site's exporter (where configured) gives memory only.
Its memory figures are shown when it has the host's; the processes are always the probe's, so that
whose attempt holds a GPU, and what a stopped one left, are still known. A host the exporter has no
figures for is shown with the probe's, its state saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.gpu.exporters import Exported
from app.gpu.probe import Snapshot


@dataclass
class HostFeeds:
    probed: Snapshot | None = None  # the SSH probe's last reading
    probe: str = ""  # how the probe reads: nvml | nvidia-smi
    probe_trouble: str = ""  # why the probe gives no readings now
    probe_trouble_state: str = "degraded"  # or no-gpus, when the host has none to watch
    exported: Exported | None = None  # the exporter's last figures, while it has the host's
    exported_at: float = 0.0
    exporter_trouble: str = ""  # why the exporter has none of the host's
    sampled_at: float = 0.0  # when a reading was last kept for the history (monotonic)

    def combined(self, probe_every: float) -> tuple[Snapshot | None, str, str, str]:
        """The readings to show, where they come from in words, the host's GPU state and why."""
        if self.exported is not None:
            processes = self.probed.processes if self.probed else []
            snapshot = Snapshot(self.exported_at, self.exported.gpus, processes)
            probe = self.probe or "the probe"
            source = f"{self.exported.source} (memory) and {probe} over SSH every {probe_every:g} s (processes)"
            state, message = self._probe_state()
            if state in ("degraded", "no-gpus") and not self._lost_gpus():
                return snapshot, source, "degraded", f"processes unknown: {message}"
            return snapshot, source, state, message
        state, message = self._probe_state()
        if self.exporter_trouble and state != "no-gpus":
            note = f"{self.exporter_trouble}; memory from the SSH probe"
            state, message = ("degraded" if state == "ok" else state), (f"{note}; {message}" if message else note)
        return self.probed, self.probe, state, message

    def _probe_state(self) -> tuple[str, str]:
        if self.probe_trouble:
            return self.probe_trouble_state, self.probe_trouble
        if self.probed is None:
            return "starting", ""
        if not self.probed.gpus:
            return "no-gpus", "this host reports no GPUs"
        if lost := self._lost_gpus():
            return "degraded", lost
        return "ok", ""

    def _lost_gpus(self) -> str:
        """The probe's GPUs that answer with an error (fallen off the bus), in words."""
        if self.probe_trouble or self.probed is None:
            return ""
        return ", ".join(f"GPU {gpu.index}: {gpu.error}" for gpu in self.probed.gpus if gpu.error)
