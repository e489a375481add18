"""The benchmarks' in-memory S3 endpoint answers like S3 for what the GET benchmarks ask of it: the CPU
figures judged against it are only worth as much as its answers. Driven through s3io over a real socket."""

from __future__ import annotations

import pytest

from benchmarks.infra import Stack
from s3io import Credentials, Policy, S3Client, errors

pytestmark = pytest.mark.timeout(60)

DATA = bytes(range(256)) * 8  # 2048 bytes


@pytest.fixture(scope="module")
def server():
    with Stack() as stack:
        yield stack.object_server(DATA, "bench", "dir/object.bin")


async def test_whole_ranged_suffix_head_and_missing_keys_on_one_connection(server) -> None:
    server.reset()
    policy = Policy(max_attempts=1)
    async with S3Client(policy, endpoint_url=server.url, credentials=Credentials("a", "b"), region="us-east-1") as s3:
        whole = await s3.get_object("bench", "dir/object.bin")
        assert (whole.data, whole.object_size) == (DATA, len(DATA))
        assert (await s3.get_object("bench", "dir/object.bin", 100, 300)).data == DATA[100:300]
        tail = await s3.get_object("bench", "dir/object.bin", -10)
        assert (tail.data, tail.start) == (DATA[-10:], len(DATA) - 10)
        info = await s3.head_object("bench", "dir/object.bin")
        assert (info.size, info.etag) == (len(DATA), whole.etag)
        with pytest.raises(errors.NotFound):
            await s3.get_object("bench", "other.bin")
    counts = server.counts()
    assert counts.total == 5
    assert (counts.kind("get"), counts.kind("whole_get"), counts.kind("ranged_get")) == (4, 2, 2)
    assert counts.kind("head") == 1 and counts.raw["statuses"] == {"200": 2, "206": 2, "404": 1}
    assert counts.raw["connections_opened"] == 1  # kept alive, like S3


async def test_a_range_past_the_end_is_416(server) -> None:
    policy = Policy(max_attempts=1)
    async with S3Client(policy, endpoint_url=server.url, credentials=Credentials("a", "b"), region="us-east-1") as s3:
        with pytest.raises(errors.RequestError, match="status=416"):
            await s3.get_object("bench", "dir/object.bin", len(DATA) + 10, len(DATA) + 20)
