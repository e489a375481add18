"""The S3Client of a read, made where it runs: on the driver (listing and footers while planning, the stream's
offsets) and on every executor (a task reading its partition, which the driver planned after reaching the store)."""

from __future__ import annotations

from s3io.s3.client import S3Client
from spark_ext.planning.read_options import ReadOptions


def read_client(options: ReadOptions, *, after_contact: bool = False) -> S3Client:
    """The S3Client of a read: its store's endpoint, region, addressing, credentials and policy. ``after_contact``:
    for work a driver planned after reaching the store (a task), which keeps every retry from its first request."""
    return (options.store.after_contact() if after_contact else options.store).client()
