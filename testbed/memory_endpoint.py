"""The launcher of the benchmarks' in-memory S3 endpoint (benchmarks/memory_s3, served by
``python -m benchmarks.object_server``) in a child process: S3 answered from memory in tens of microseconds, so what
a benchmark measures is the client, and a 256 MiB object held by the server is not in the client's memory.

    with MemoryEndpoint() as endpoint: ...                                  # no buckets at all
    with MemoryEndpoint(seed=(data, "bucket", "key"), latency=0.05): ...    # one object, each answer 50 ms late
    endpoint.url_for(0.05)    # another port on the same buckets whose answers wait 50 ms
    endpoint.seed_many(bucket, prefix, count, dirs, body_file)    # many objects without a request each
"""

from __future__ import annotations

from testbed.processes import ChildServer

SEED_TIMEOUT_SECONDS = 600.0  # a million keys take a while


class MemoryEndpoint(ChildServer):
    """The in-memory S3 endpoint, its first port waiting ``latency`` s per answer; with ``seed`` = (data, bucket,
    key) it starts holding that one object, else with no buckets at all."""

    NAME = "the in-memory S3 endpoint"

    def __init__(self, latency: float = 0.0, seed: tuple[bytes, str, str] | None = None) -> None:
        super().__init__("benchmarks.object_server", ["--latency", str(latency)])
        self.latency = latency
        self._seed = seed
        self._urls: dict[float, str] = {}

    def _launch(self, deadline: float) -> None:
        if self._seed is not None:
            data, bucket, key = self._seed
            self._seed = None  # the server holds it now, not this process
            object_file = self._require_dir() / "seed.bin"
            object_file.write_bytes(data)
            self._args = [*self._args, "--object", str(object_file), bucket, key]
        super()._launch(deadline)
        self._urls = {self.latency: self.url}

    def seed_many(self, bucket: str, prefix: str, count: int, dirs: int, body_file: str) -> int:
        """Store `count` copies of `body_file` under `prefix` (in `dirs` Hive directories) without a request each."""
        answer = self.ask(f"seed-many {bucket} {prefix} {count} {dirs} {body_file}", timeout=SEED_TIMEOUT_SECONDS)
        return int(answer["objects"])

    def url_for(self, latency: float) -> str:
        """The URL of a port on the same buckets whose answers wait `latency` s (opened on first use)."""
        if latency not in self._urls:
            self._urls[latency] = f"http://127.0.0.1:{self.ask(f'listen {latency!r}')['port']}"
        return self._urls[latency]
