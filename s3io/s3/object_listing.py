"""The S3 client's listings: one page, every page (checked against looping and lying continuation tokens), the
objects and the common prefixes of a prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

from s3io.resilience.deadline import Watchdog
from s3io.s3 import xml
from s3io.s3.paging import ListingGuard
from s3io.s3.request import S3Request
from s3io.s3.request_core import RequestCore
from s3io.s3.types import ObjectInfo


class ObjectListing(RequestCore):
    """ListObjectsV2 and its pages (see the module doc)."""

    async def list_page(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        continuation_token: str | None = None,
        start_after: str | None = None,
        max_keys: int = 1000,
    ) -> tuple[list[ObjectInfo], list[str], str | None]:
        """One ListObjectsV2 page: (objects, common prefixes, next continuation token or None).

        Keys travel url-encoded (``encoding-type=url``: a key may hold characters XML cannot carry) and are
        decoded here."""
        query = {"list-type": "2", "max-keys": str(max_keys), "encoding-type": "url"}
        if prefix:
            query["prefix"] = prefix
        if delimiter:
            query["delimiter"] = delimiter
        if continuation_token:
            query["continuation-token"] = continuation_token
        if start_after:
            query["start-after"] = start_after

        async def attempt(watchdog: Watchdog) -> tuple[list[ObjectInfo], list[str], str | None]:
            response = await self._send(watchdog, S3Request("list", "GET", bucket, query=query))
            return xml.parse_list_page(bucket, response.body)

        return await self._runner.run("list", bucket, prefix, attempt)

    async def list_pages(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[tuple[list[ObjectInfo], list[str]]]:
        """(objects, common prefixes) of each ListObjectsV2 page under ``prefix`` (at most ``page_size`` entries,
        S3's maximum and default 1,000), each page its own operation with its own deadline. A server that hands back
        a continuation token it gave before is looping: ListingLoop after that page, not an endless read. So is one
        whose page goes back to a key (or prefix) at or before one an earlier page gave (S3 lists in key order), with
        fresh tokens: ListingLoop before that page; and one that gives page after page of nothing, each saying more
        follows (``paging.MAX_EMPTY_PAGES`` in a row)."""
        token: str | None = None
        guard = ListingGuard(bucket, prefix)
        while True:
            objects, prefixes, token = await self.list_page(
                bucket,
                prefix,
                delimiter=delimiter,
                continuation_token=token,
                start_after=start_after,
                max_keys=page_size,
            )
            guard.page([o.key for o in objects] + prefixes)
            yield objects, prefixes
            if token is None:
                return
            guard.next(token)

    async def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix``, page by page (``list_pages``: ListingLoop if the server loops)."""
        pages = self.list_pages(bucket, prefix, delimiter=delimiter, start_after=start_after, page_size=page_size)
        async for objects, _ in pages:
            for obj in objects:
                yield obj

    async def list_prefixes(self, bucket: str, prefix: str = "", delimiter: str = "/") -> list[str]:
        """The common prefixes ("directories") directly under ``prefix`` (ListingLoop if the server loops)."""
        return [p async for _, prefixes in self.list_pages(bucket, prefix, delimiter=delimiter) for p in prefixes]
