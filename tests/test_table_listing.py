"""list_tree lists what a plain listing lists, in key order, with a prefix's directories listed concurrently; against
moto, with small pages so that every page boundary (inside a directory, among top-level files, at a directory's
first key) and every depth is crossed by a few dozen keys."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest

from s3io import Policy, S3Client
from s3io.table.listing import list_directories, list_tree
from testbed.faultproxy import FaultProxy, FaultRule, Latency

pytestmark = pytest.mark.timeout(120)

POLICY = Policy(max_attempts=2, backoff_base=0.01)
KEYS = sorted(
    [
        "t/a.parquet",
        "t/day=01.parquet",  # a file named like the directory beside it ("." sorts before "/")
        *(f"t/day=01/part-{i}.parquet" for i in range(5)),
        *(f"t/day=02/hour={h:02d}/part-{i}.parquet" for h in range(4) for i in range(3)),
        "t/day=02/summary.json",
        *(f"t/day={d:02d}/part-{i}.parquet" for d in range(3, 7) for i in range(4)),
        *(f"t/_staging/{i}.parquet" for i in range(3)),  # hidden directories are listed too (raw listing)
        "t/z.parquet",
        "u/outside.parquet",
    ]
)


def put_keys(s3_client: Any, bucket: str) -> None:
    for key in KEYS:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"")


async def plain(client: S3Client, bucket: str, prefix: str, start_after: str | None = None) -> list[str]:
    return [o.key async for o in client.list_objects(bucket, prefix, start_after=start_after)]


async def test_the_tree_listing_equals_the_plain_listing_for_every_page_size_start_and_fan_out(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    put_keys(s3_client, bucket)
    starts = [None, "t/day=01/part-2.parquet", "t/day=02/hour=01/", "t/day=06/part-3.parquet"]
    async with S3Client(POLICY, endpoint_url=s3_endpoint.url) as client:
        for prefix in ("t/", "t/day=0"):
            for start_after in starts:
                expected = await plain(client, bucket, prefix, start_after)
                for page_size in (2, 5, 1000):
                    for concurrency in (1, 16):  # 1: every directory at once; 16: down to the deepest level
                        shape = {"start_after": start_after, "page_size": page_size, "concurrency": concurrency}
                        listed = await list_tree(client, bucket, prefix, **shape)  # type: ignore[arg-type]
                        assert [o.key for o in listed] == expected, (prefix, shape)
        listed = await list_directories(client, bucket, ["t/day=03/", "t/day=01/"], page_size=2)
        assert [o.key for o in listed] == [k for k in KEYS if k.startswith(("t/day=01/", "t/day=03/"))]


async def test_include_leaves_out_refused_directories_without_listing_them(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    put_keys(s3_client, bucket)

    def include(directory: str) -> bool:
        return directory not in ("t/day=04/", "t/day=02/hour=01/", "t/_staging/")

    def kept(key: str) -> bool:
        parts = key.split("/")[:-1]
        return all(include("/".join(parts[: i + 1]) + "/") for i in range(1, len(parts)))

    async with S3Client(POLICY, endpoint_url=fault_proxy.url) as client:
        fault_proxy.reset_log()
        listed = await list_tree(client, bucket, "t/", include=include, page_size=3, concurrency=2)
        assert [o.key for o in listed] == [k for k in KEYS if k.startswith("t/") and kept(k)]
        prefixes = [parse_qs(r.query).get("prefix", [""])[0] for r in fault_proxy.requests]
        assert "t/day=04/" not in prefixes and "t/_staging/" not in prefixes  # never listed at all


async def test_directories_are_listed_concurrently_and_a_one_page_prefix_costs_one_request(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    put_keys(s3_client, bucket)
    fault_proxy.add_rule(FaultRule(Latency(0.05), method="GET"))
    async with S3Client(POLICY, endpoint_url=fault_proxy.url) as client:
        fault_proxy.reset_log()
        listed = await list_tree(client, bucket, "t/", page_size=4, concurrency=4)
        assert [o.key for o in listed] == [k for k in KEYS if k.startswith("t/")]
        answered = fault_proxy.wait_for_requests(len(fault_proxy.requests), completed=True)  # all recorded as done
        spans = [(r.time, r.finished) for r in answered]
        most = max(sum(1 for start, end in spans if start <= t < end) for t, _ in spans)
        assert 2 <= most <= 4  # in flight at once: several, never more than asked

        fault_proxy.reset_log()
        assert [o.key for o in await list_tree(client, bucket, "u/")] == ["u/outside.parquet"]
        assert fault_proxy.count(method="GET") == 1
