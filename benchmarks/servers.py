"""The server dimension of the many-object benchmarks: moto (behind the keep-alive proxy) or the in-memory S3
endpoint, behind one small interface so a benchmark runs the same rows against each, in one run.

Why both: moto spends ~3 ms of CPU per request on the cores the client uses, so on moto a row shows moto's
limit; on the in-memory endpoint (tens of microseconds per request) it shows the client's own costs, as real
S3 would. Set-up uploads go straight to the server (`setup_url`), never through what counts the requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, ChildServer, Stack

SERVER_NAMES = ("moto", "memory")  # the order rows appear in


@dataclass(frozen=True)
class Target:
    """Where a timed client is pointed (`url`), and the process that counts its requests (`counter`)."""

    url: str
    counter: ChildServer


@dataclass(frozen=True)
class Server:
    """One S3 server a benchmark runs against."""

    name: str  # "moto" | "memory"
    stack: Stack

    @property
    def label(self) -> str:
        return "moto (keep-alive proxy)" if self.name == "moto" else "in-memory endpoint"

    @property
    def setup_url(self) -> str:
        """Where set-up traffic (uploads, clean-up, checks) goes, uncounted."""
        return self.stack.moto_url if self.name == "moto" else self.stack.endpoint.url

    def target(self, latency: float = 0.0) -> Target:
        """The endpoint a timed client uses, waiting `latency` s before each answer's first byte."""
        if self.name == "moto":
            proxy = self.stack.proxy(latency)
            return Target(proxy.url, proxy)
        endpoint = self.stack.endpoint
        return Target(endpoint.url_for(latency), endpoint)

    def cpu(self) -> float:
        """CPU seconds the server side has used so far (moto and its proxies, or the endpoint): diff two."""
        used = self.stack.server_cpu()
        return used["moto"] + used["proxy"] if self.name == "moto" else used["endpoint"]

    def client(self) -> Any:
        """A boto3 S3 client on `setup_url`."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.setup_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )


def servers(stack: Stack, names: tuple[str, ...]) -> tuple[Server, ...]:
    """The servers named, in SERVER_NAMES order; an unknown name is an error that lists the known ones."""
    unknown = set(names) - set(SERVER_NAMES)
    if unknown:
        raise ValueError(f"unknown server(s) {sorted(unknown)}; expected some of {SERVER_NAMES}")
    return tuple(Server(name, stack) for name in SERVER_NAMES if name in names)
