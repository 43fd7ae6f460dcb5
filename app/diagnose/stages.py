"""The launch stages an SGLang log goes through, and which of its records starts each one.

Both the diagnosis (the stage a launch reached) and the log viewer (a log read as one section per
stage) follow a log with one `StageTracker`, so the two never disagree about where a stage starts.
"""

from __future__ import annotations

import re

CAPTURE_DONE = re.compile(r"graph end|^(?:Decode|Prefill) batch|max_total_num_tokens=")
READY = "The server is fired up and ready to roll!"
STAGES = (  # in launch order; each recognised by the first line SGLang writes in it
    ("args parsed", re.compile(r"^server_args=")),
    ("weights loading", re.compile(r"Load weight begin|Loading safetensors checkpoint shards")),
    ("weights loaded", re.compile(r"Load weight end")),
    ("kv cache allocated", re.compile(r"KV Cache is allocated|Memory pool end")),
    (
        "cuda graph capture",
        re.compile(r"Capture [\w ()]*?(?:cuda|npu) graph begin|Capturing (?:batches|num tokens)", re.I),
    ),
    ("http server up", re.compile(r"Uvicorn running on")),
    ("ready", re.compile(re.escape(READY))),
    # A prefill before the ready line is the warmup's; decode batches come only from real traffic.
    ("serving", re.compile(r"^Decode batch[.,]")),
)
PERCENT = re.compile(r"(\d{1,3})%")
STAGE_INDEX = {name: index for index, (name, _) in enumerate(STAGES)}
WEIGHTS_STAGE, CAPTURE_STAGE = STAGE_INDEX["weights loading"], STAGE_INDEX["cuda graph capture"]
READY_STAGE, SERVING = STAGE_INDEX["ready"], STAGE_INDEX["serving"]
# A progress bar with no description ("  0%|   | 0/17 [00:00<?, ?it/s]"): once the weights are in,
# only CUDA graph capture draws one (some releases, and DP replicas, leave out its label).
BARE_BAR = re.compile(r"^\d{1,3}%\|[^|]*\| *\d+/\d+ \[")


def _anywhere(pattern: re.Pattern[str]) -> str:
    source = pattern.pattern.replace("^", "")
    return f"(?i:{source})" if pattern.flags & re.I else f"(?:{source})"


def _may_move(index: int) -> re.Pattern[bytes]:
    """The raw lines that can move a tracker at stage `index` on: a later stage's line unanchored,
    before capture a percentage and the end of capture too (the bare bar's rule), once ready a prefill."""
    parts = [_anywhere(pattern) for _, pattern in STAGES[index + 1 :]]
    if index < CAPTURE_STAGE:
        parts += [_anywhere(CAPTURE_DONE), "%"]
    if index == READY_STAGE:
        parts.append("Prefill batch")
    return re.compile("|".join(parts or ["(?!)"]).encode())


# A reader of a long log hands only these lines to `see`, found at C speed (see may_move).
_MAY_MOVE = [_may_move(index) for index in range(-1, len(STAGES))]


def may_move(index: int) -> re.Pattern[bytes]:
    """What a raw line must contain to move a tracker at stage `index` (-1 before the first)."""
    return _MAY_MOVE[index + 1]


class StageTracker:
    """The stage a log has reached, record by record (a record being a line without its wrappers
    and SGLang's prefix, as `app.diagnose.lines.logical_lines` gives it). Stages only move on; a
    later stage's line seen early (a rank ahead of the others) moves the tracker there."""

    def __init__(self) -> None:
        self.index = -1  # into STAGES; -1 before the first
        self.percent: int | None = None  # the stage's progress bar, where it has one
        self.capture_done = False  # a line that only comes once CUDA graph capture is over

    @property
    def name(self) -> str | None:
        return STAGES[self.index][0] if self.index >= 0 else None

    def see(self, text: str) -> tuple[list[str], bool]:
        """The stages the record `text` (stripped) enters, in order, and whether it shows the
        launch moving on (a stage entered, its first line from another rank, a bar that moved)."""
        entered: list[str] = []
        moved = False
        record = text
        if text.startswith("Prefill batch") and self.index == READY_STAGE:
            text = "Decode batch."  # traffic after the ready line: serving
        weights_in = self.index > WEIGHTS_STAGE or (self.index == WEIGHTS_STAGE and self.percent == 100)
        if weights_in and self.index <= CAPTURE_STAGE and not self.capture_done and BARE_BAR.match(text):
            text = f"Capturing batches: {text}"
        for index, (name, pattern) in enumerate(STAGES):
            if index >= self.index and pattern.search(text):
                if index > self.index:
                    self.percent = None
                    entered.append(name)
                    moved = True
                elif self.percent is None:
                    moved = True  # another rank entering the stage, before any bar moved
                self.index = index
                if index in (WEIGHTS_STAGE, CAPTURE_STAGE) and (percent := PERCENT.search(text)):
                    # A bar moving on is progress; once it has, another rank's line entering the stage is not.
                    self.percent = int(percent.group(1))
                    moved = True
        if not self.capture_done and CAPTURE_DONE.search(record):
            self.capture_done = True
        return entered, moved
