"""Auto-compaction: after a write, compact the partition directories it wrote that hold many small files, as
Delta's auto compaction does after a write.

A directory qualifies when it holds at least ``auto_compact_min_files`` data files (directly in it) smaller than
the compaction's candidate threshold (75 % of the target). The compaction is the ordinary one (s3io.compaction:
its lock, journal and grace periods, the leases of streams reading the prefix), rooted at the write's prefix and
limited to those directories, with the write's target file size. It runs in the committing process, after the
write is visible, and adds its time to the commit's: at least twice the grace period when it runs. A compaction
already running on the prefix (its lock held) makes it skip this time; the next write tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from s3io.compaction.driver import compact_prefix
from s3io.compaction.options import CompactionOptions
from s3io.compaction.report import CompactionReport
from s3io.errors import S3IOError
from s3io.s3.client import S3Client
from s3io.table import layout, list_visible
from s3io.urls import parse_s3_url
from s3io.write.options import WriteOptions

log = logging.getLogger("s3io.write")


def compaction_options(options: WriteOptions, directories: Iterable[str]) -> CompactionOptions:
    """The compaction of a write's directories: the write's target size, grace period and clock skew."""
    return CompactionOptions(
        target_file_size=options.target_file_size,
        grace_period=options.grace_period,
        clock_skew=options.clock_skew,
        directories=tuple(directories),
        owner=options.owner,
    )


async def small_files(client: S3Client, bucket: str, directory: str, threshold: int) -> int:
    """How many data files directly in ``directory`` a journal-aware reader sees below ``threshold`` bytes."""
    (listing,) = await list_visible(client, [parse_s3_url(f"s3://{bucket}/{directory}")])
    files = [f.info for f in listing.files]
    return sum(1 for f in files if layout.partition_dir(f.key) == directory and f.size < threshold)


async def auto_compact(
    client: S3Client, bucket: str, prefix: str, written: Iterable[str], options: WriteOptions
) -> CompactionReport | None:
    """Compact the directories of the keys ``written`` that qualify (see the module doc); None when none does.
    Never raises for the compaction's own troubles: the write is committed whatever happens here."""
    directories = sorted({layout.partition_dir(key) for key in written})
    threshold = compaction_options(options, directories).threshold
    worth = [
        d for d in directories if await small_files(client, bucket, d, threshold) >= options.auto_compact_min_files
    ]
    if not worth:
        return None
    url = f"s3://{bucket}/{prefix}"
    try:
        report = await compact_prefix(client, url, compaction_options(options, worth))
    except S3IOError as exc:
        log.warning("auto-compaction of %s after a write failed (%s); the next write tries again", url, exc)
        return None
    log.info(
        "auto-compaction of %d director%s of %s: %s", len(worth), "y" if len(worth) == 1 else "ies", url, report.status
    )
    return report
