"""The report a compaction returns: what was there, what was done, what was skipped and why, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field

from s3io.compaction.grouping import CompactionPlan, SkippedFile, SkippedGroup, format_size
from s3io.table.recovery import RecoveryReport

# status values
OK = "ok"  # every planned group was published (or committed, with finish=False)
NOTHING_TO_DO = "nothing_to_do"  # no group was worth rewriting
DRY_RUN = "dry_run"  # planned only
PARTIAL = "partial"  # some groups failed; the others were compacted
LOCKED = "locked"  # another job holds the lock: nothing was changed
LOCK_LOST = "lock_lost"  # our lock expired or was taken over: we stopped; the journal lets the next run finish
REFUSED = "refused"  # the store lacks a condition the protocol needs, or another compaction root overlaps


@dataclass
class GroupReport:
    group_id: str
    partition_dir: str
    input_files: int
    input_bytes: int
    rows: int | None = None
    output_key: str | None = None
    output_bytes: int | None = None
    state: str = "planned"  # planned | committed | published | done | failed
    error: str | None = None


@dataclass
class CompactionReport:
    url: str
    job_id: str
    status: str = OK
    message: str = ""
    dry_run: bool = False
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    rows_rewritten: int = 0
    leased_files: int = 0  # small files left out because a live stream lease has not read them yet
    groups: list[GroupReport] = field(default_factory=list)
    skipped_groups: list[SkippedGroup] = field(default_factory=list)
    skipped_files: list[SkippedFile] = field(default_factory=list)
    recovery: RecoveryReport | None = None
    conflicts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lock_taken_over_from: str | None = None
    store: str = ""  # the store probe's verdict: what the store lacks, the condition forms it needs, its clock
    delete_guard: str = ""  # what guards each input's delete on this store (s3io.s3.capabilities.DeleteGuard)
    duration_s: float = 0.0
    requests: int = 0
    retries: int = 0
    waited_s: float = 0.0  # of duration_s, time spent in grace-period waits
    plan: CompactionPlan | None = None

    @property
    def groups_done(self) -> int:
        return sum(1 for g in self.groups if g.state in ("published", "done", "committed"))

    @property
    def groups_failed(self) -> int:
        return sum(1 for g in self.groups if g.state == "failed")

    def to_text(self) -> str:
        """The final report table."""
        rows = [
            ("status", self.status + (f" ({self.message})" if self.message else "")),
            ("job", self.job_id),
            ("files", f"{self.files_before} -> {self.files_after}"),
            ("bytes", f"{format_size(self.bytes_before)} -> {format_size(self.bytes_after)}"),
            ("rows rewritten", str(self.rows_rewritten)),
            ("groups", f"{self.groups_done} done, {self.groups_failed} failed, {len(self.skipped_groups)} skipped"),
            ("duration", f"{self.duration_s:.2f} s (of which {self.waited_s:.2f} s grace-period waits)"),
            ("requests", f"{self.requests} ({self.retries} retries)"),
        ]
        if self.recovery is not None and (self.recovery.entries_found or self.recovery.staging_deleted):
            rows.append(("recovery", self.recovery.describe()))
        if self.lock_taken_over_from:
            rows.append(("lock", f"taken over from {self.lock_taken_over_from} (expired)"))
        if self.delete_guard:
            rows.append(("deletes", f"inputs deleted through {self.delete_guard}"))
        if self.store:
            rows.append(("store", self.store))
        width = max(len(k) for k, _ in rows)
        lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
        for g in self.groups:
            if g.state == "failed":
                lines.append(f"failed  {g.group_id} {g.partition_dir or '/'}: {g.error}")
        for s in self.skipped_groups:
            lines.append(f"skipped {s.partition_dir or '/'} ({len(s.keys)} files): {s.reason}")
        for f in self.skipped_files:
            if f.kind != "large_enough":
                lines.append(f"skipped {f.key}: {f.reason}")
        lines.extend(f"conflict: {c}" for c in self.conflicts)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)
