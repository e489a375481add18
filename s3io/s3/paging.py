"""What a paginated listing must show to ever end, checked page by page: ListingLoop as soon as it cannot.

A looping server never says "done": it hands back a marker it gave before, or fresh markers that lead back to keys
already listed (S3 lists in key order), or page after page of nothing that each say more will follow. The S3
client's listings and the fsspec filesystem's (which pages through botocore) use one ``ListingGuard`` each.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from s3io import errors
from s3io.s3.xml import shorten

# Truncated pages in a row holding no key. S3 sends such pages while it skips delete markers (about one per
# thousand skipped), so this allows a run of ten million delete markers and still ends a server that loops.
MAX_EMPTY_PAGES = 10_000
DIRECTORY_BUCKET_SUFFIX = "--x-s3"  # S3 Express directory buckets: their listings are not in key order


def lists_in_key_order(bucket: str) -> bool:
    """Whether S3 lists ``bucket`` in key order (every bucket but S3 Express directory buckets)."""
    return not bucket.endswith(DIRECTORY_BUCKET_SUFFIX)


class ListingGuard:
    """The checks of one paginated listing: ``page`` before a page is handed out, ``next`` before the next is asked."""

    __slots__ = ("_bucket", "_empty_run", "_highest", "_prefix", "_seen", "_what", "pages")

    def __init__(self, bucket: str, prefix: str, what: str = "continuation token") -> None:
        self._bucket = bucket
        self._prefix = prefix
        self._what = what
        self._seen: set[Hashable] = set()
        self._highest: str | None = None
        self._empty_run = 0
        self.pages = 0

    def page(self, names: Sequence[str], *, ordered: bool = True) -> None:
        """A page holding ``names`` (keys and common prefixes) arrived; ``ordered``: no name may sort at or before
        one of an earlier page (false for listings where one key spans pages, such as its versions, and for
        buckets not listed in key order)."""
        self.pages += 1
        if not names:
            self._empty_run += 1
            return
        self._empty_run = 0
        if not ordered or not lists_in_key_order(self._bucket):
            return
        lowest = min(names)
        if self._highest is not None and lowest <= self._highest:
            back, before = shorten(lowest, 128), shorten(self._highest, 128)
            raise self._loop(
                f"went back to {back!r} on page {self.pages}, at or before {before!r} of an earlier page: S3 lists in "
                f"key order, so the server is looping (its {self._what} does not move the listing)"
            )
        self._highest = max(names)

    def next(self, marker: Hashable) -> None:
        """The page just handed out said more follows, from ``marker``: refuse a marker given before, and a run of
        empty pages no real listing has."""
        if marker in self._seen:
            raise self._loop(f"repeated a {self._what} after {self.pages} pages: the server is looping")
        if self._empty_run >= MAX_EMPTY_PAGES:
            raise self._loop(
                f"gave {self._empty_run} pages in a row holding no key, each saying more would follow: the server is "
                "looping"
            )
        self._seen.add(marker)

    def _loop(self, what: str) -> errors.ListingLoop:
        return errors.ListingLoop(
            f"the listing of s3://{self._bucket}/{self._prefix} {what}; the listing was stopped",
            bucket=self._bucket,
            key=self._prefix,
        )
