"""s3io.fs.S3FileSystem against a moto S3 server: s3fs's operations, s3io reads, protocols, policy plumbing."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import s3fs
from fsspec.implementations.local import LocalFileSystem
from s3fs.utils import FileExpired

import s3io.fs
from s3io import Policy
from s3io.fs import S3FileSystem, S3FileSystemAsS3, S3IOFile
from testbed.moto_server import boto3_client

pytestmark = pytest.mark.timeout(60)

FAST_RETRIES = {"max_attempts": "3", "backoff_base": "1ms", "backoff_cap": "100ms"}
PAYLOAD = bytes(range(256)) * 40  # 10 240 bytes
OPEN_TAIL_OVERLAP = 3000


@pytest.fixture
def fs(s3_endpoint: Any) -> Iterator[S3FileSystem]:
    filesystem = S3FileSystem(endpoint_url=s3_endpoint.url, policy=FAST_RETRIES, skip_instance_cache=True)
    try:
        yield filesystem
    finally:
        filesystem.close()


@pytest.fixture
def obj(fs: S3FileSystem, bucket: str) -> str:
    path = f"{bucket}/dir/data.bin"
    fs.pipe(path, PAYLOAD)
    return path


def test_put_ls_info_cat_rm_round_trip(fs: S3FileSystem, bucket: str, tmp_path: Any) -> None:
    local = tmp_path / "up.bin"
    local.write_bytes(b"uploaded")
    fs.put(str(local), f"{bucket}/a/up.bin")
    fs.pipe(f"{bucket}/a/piped.bin", b"piped")

    assert fs.ls(f"{bucket}/a", detail=False) == [f"{bucket}/a/piped.bin", f"{bucket}/a/up.bin"]
    assert fs.info(f"s3io://{bucket}/a/up.bin")["size"] == len(b"uploaded")
    assert fs.info(f"{bucket}/a")["type"] == "directory"
    assert fs.cat(f"{bucket}/a/up.bin") == b"uploaded"
    assert fs.exists(f"{bucket}/a/piped.bin")

    fs.rm(f"{bucket}/a/piped.bin")
    assert not fs.exists(f"{bucket}/a/piped.bin")
    assert fs.ls(f"{bucket}/a", detail=False, refresh=True) == [f"{bucket}/a/up.bin"]


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (None, None),
        (0, 10),
        (100, 200),
        (-50, None),
        (10, -10),
        (-100, -20),
        (10_000, 20_000),
        (20_000, None),
        (5, 5),
    ],
)
def test_cat_file_limits_match_a_local_file(fs: S3FileSystem, obj: str, tmp_path: Any, start: Any, end: Any) -> None:
    local = tmp_path / "data.bin"
    local.write_bytes(PAYLOAD)
    expected = LocalFileSystem().cat_file(str(local), start=start, end=end)
    assert fs.cat_file(obj, start=start, end=end) == expected


def test_cat_ranges_returns_results_in_request_order(fs: S3FileSystem, obj: str, bucket: str) -> None:
    paths = [obj, obj, f"{bucket}/missing", obj]
    out = fs.cat_ranges(paths, [300, 0, 0, 10_200], [310, 4, 1, 10_300])
    assert out[0] == PAYLOAD[300:310]
    assert out[1] == PAYLOAD[0:4]
    assert isinstance(out[2], FileNotFoundError)
    assert out[3] == PAYLOAD[10_200:]
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges(paths, 0, 1, on_error="raise")


def test_reads_go_through_the_s3io_client(fs: S3FileSystem, obj: str, tmp_path: Any) -> None:
    before = fs.stats()
    with fs.open(obj, "rb", block_size=4096, cache_type="none") as f:
        assert isinstance(f, S3IOFile)
        assert f.read(10) == PAYLOAD[:10]
        f.seek(5000)
        assert f.read() == PAYLOAD[5000:]
    assert fs.cat(obj) == PAYLOAD
    fs.get(obj, str(tmp_path / "copy.bin"))
    assert (tmp_path / "copy.bin").read_bytes() == PAYLOAD

    used = fs.stats() - before
    # the file: one GET at open (its last block: 4096 bytes), one per read before that block, then cat, then get
    assert used.requests_for("get") == 5
    assert used.requests_for("get_object") == 0  # botocore never fetched a body
    assert used.requests_for("head_object") == 0  # open learnt the size from its GET


def test_whole_object_read_is_chunked_and_pinned_to_the_first_etag(
    fault_proxy: Any, bucket: str, s3_endpoint: Any
) -> None:
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="big.bin", Body=PAYLOAD)
    fs = S3FileSystem(endpoint_url=fault_proxy.url, default_block_size=4096, skip_instance_cache=True)
    try:
        assert fs.cat(f"{bucket}/big.bin") == PAYLOAD
    finally:
        fs.close()
    gets = fault_proxy.requests
    assert sorted(r.range for r in gets) == ["bytes=0-4095", "bytes=4096-8191", "bytes=8192-10239"]
    etag = next(r for r in gets if r.range == "bytes=0-4095")
    assert etag.if_match is None
    assert all(r.if_match for r in gets if r is not etag)


def test_object_replaced_while_open_raises_file_expired(fs: S3FileSystem, bucket: str) -> None:
    """Bytes past what open()'s GET held come from the object opened, or FileExpired (the held tail is that
    object's too)."""
    large = PAYLOAD * 40  # 400 KiB: more than open()'s GET of the last OPEN_PROBE_BYTES holds
    assert len(large) > s3io.fs.OPEN_PROBE_BYTES
    fs.pipe(f"{bucket}/large.bin", large)
    with fs.open(f"{bucket}/large.bin", "rb", block_size=1024, cache_type="none") as f:
        assert f.read(100) == large[:100]
        fs.pipe(f"{bucket}/large.bin", b"x" * len(large))
        with pytest.raises(FileExpired):
            f.read(100)
        f.seek(-100, 2)
        assert f.read() == large[-100:]


def test_open_for_reading_sends_no_head(fs: S3FileSystem, bucket: str) -> None:
    """open() learns the size and the ETag from one GET of the last OPEN_PROBE_BYTES, which also serves the
    reads it covers; later GETs are pinned to that ETag. info() keeps its HEAD."""
    large = PAYLOAD * 40
    fs.pipe(f"{bucket}/large.bin", large)
    before = fs.stats()
    with fs.open(f"{bucket}/large.bin", "rb", cache_type="none") as f:
        assert f.size == len(large)
        f.seek(-5000, 2)
        assert f.read() == large[-5000:]  # a footer: from open()'s GET
        assert f.read(10) == b""
        f.seek(0)
        assert f.read(10) == large[:10]
        f.seek(len(large) - OPEN_TAIL_OVERLAP)
        assert f.read() == large[-OPEN_TAIL_OVERLAP:]  # held
        f.seek(len(large) - s3io.fs.OPEN_PROBE_BYTES - 10)
        assert f.read(20) == large[-s3io.fs.OPEN_PROBE_BYTES - 10 :][:20]  # 10 fetched, 10 held
    used = fs.stats() - before
    assert used.requests_for("head_object") == 0
    assert used.requests_for("get") == 3
    assert fs.info(f"{bucket}/large.bin")["size"] == len(large)
    assert (fs.stats() - before).requests_for("head_object") == 1
    with pytest.raises(FileNotFoundError):
        fs.open(f"{bucket}/missing.bin", "rb")
    with fs.open(f"{bucket}/large.bin", "rb", size=len(large), cache_type="none") as f:
        assert f.read(10) == large[:10]  # a caller-given size: no GET at open


def test_get_file_writes_identical_bytes_in_chunks(fs: S3FileSystem, obj: str, tmp_path: Any) -> None:
    target = tmp_path / "out.bin"
    fs.get_file(obj, str(target), chunksize=3000)
    assert target.read_bytes() == PAYLOAD


def test_get_file_leaves_no_partial_file_when_the_object_is_missing(
    fs: S3FileSystem, bucket: str, tmp_path: Any
) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(FileNotFoundError):
        fs.get_file(f"{bucket}/missing", str(target))
    assert not target.exists()


def test_a_failed_get_file_leaves_the_file_that_was_there_untouched(
    fs: S3FileSystem, obj: str, bucket: str, tmp_path: Any
) -> None:
    """A typo in the key, a 403, a timeout: the local file is neither truncated nor deleted (as in s3fs); a
    download that succeeds replaces it whole, keeping its mode, and through a symlink the link's target gets the
    bytes. No temporary file is left either way."""
    target = tmp_path / "precious.bin"
    target.write_bytes(b"precious local data")
    target.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    for path in (target, link):
        with pytest.raises(FileNotFoundError):
            fs.get_file(f"{bucket}/typo-in-key", str(path))
        assert target.read_bytes() == b"precious local data"
    fs.get_file(obj, str(link), chunksize=3000)
    assert link.is_symlink() and target.read_bytes() == PAYLOAD
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "precious.bin"]


def test_get_file_writes_through_hard_links_and_honours_modes_as_s3fs_does(
    fs: S3FileSystem, obj: str, tmp_path: Any
) -> None:
    """Where a temporary file cannot replace the target, the download is copied into it in place, as s3fs writes:
    a second hard link sees the new bytes. Run as another user (root ignores modes): a writable file in a
    read-only directory is downloaded into, and a read-only file is refused and left as it was."""
    target, twin = tmp_path / "c.bin", tmp_path / "c-link.bin"
    target.write_bytes(b"old")
    os.link(target, twin)
    fs.get_file(obj, str(target))
    assert twin.read_bytes() == PAYLOAD and sorted(p.name for p in tmp_path.iterdir()) == ["c-link.bin", "c.bin"]
    if os.geteuid() != 0:
        pytest.skip("the permission cases need root, to act as an unprivileged user")
    base = Path(tempfile.mkdtemp())  # not under tmp_path: pytest's base directory is root's alone
    try:
        base.chmod(0o777)
        locked, read_only = base / "ro" / "out.bin", base / "ro.bin"
        locked.parent.mkdir()
        for path, mode in ((locked, 0o666), (read_only, 0o444)):
            path.write_bytes(b"old")
            path.chmod(mode)
        locked.parent.chmod(0o555)
        outcomes = _as_nobody(lambda: [_outcome(fs, obj, str(path)) for path in (locked, read_only)])
        assert outcomes == ["ok", "PermissionError"]
        assert locked.read_bytes() == PAYLOAD and read_only.read_bytes() == b"old"
    finally:
        if (base / "ro").exists():
            (base / "ro").chmod(0o755)
        shutil.rmtree(base)


def _outcome(fs: S3FileSystem, obj: str, path: str) -> str:
    try:
        S3FileSystem(endpoint_url=fs.endpoint_url, skip_instance_cache=True).get_file(obj, path)
    except OSError as exc:
        return type(exc).__name__
    return "ok"


def _as_nobody(work: Any) -> Any:
    """``work()`` in a forked child running as uid/gid 65534; its result (JSON) comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(work()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()  # EOF when the child exits
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, answer
    return json.loads(answer)


def test_s3io_urls_open_through_fsspec(obj: str, s3_endpoint: Any) -> None:
    assert fsspec.get_filesystem_class("s3io") is S3FileSystem
    with fsspec.open(f"s3io://{obj}", "rb", endpoint_url=s3_endpoint.url) as f:
        assert f.read() == PAYLOAD
    filesystem, path = fsspec.url_to_fs(f"s3io://{obj}", endpoint_url=s3_endpoint.url)
    assert isinstance(filesystem, S3FileSystem)
    assert path == obj
    assert filesystem.unstrip_protocol(path) == f"s3io://{obj}"


def test_install_as_s3_serves_s3_urls_until_uninstalled(obj: str, s3_endpoint: Any) -> None:
    try:
        s3io.fs.install_as_s3()
        assert fsspec.get_filesystem_class("s3") is S3FileSystemAsS3
        assert fsspec.get_filesystem_class("s3a") is S3FileSystemAsS3
        with fsspec.open(f"s3://{obj}", "rb", endpoint_url=s3_endpoint.url) as f:
            assert f.read(16) == PAYLOAD[:16]
        filesystem, path = fsspec.url_to_fs(f"s3a://{obj}", endpoint_url=s3_endpoint.url)
        assert isinstance(filesystem, S3FileSystem)
        assert filesystem.unstrip_protocol(path) == f"s3://{obj}"  # paths it writes resolve without s3io
    finally:
        s3io.fs.uninstall_as_s3()
    cls = fsspec.get_filesystem_class("s3")
    assert not issubclass(cls, S3FileSystem)
    assert issubclass(cls, s3fs.S3FileSystem)


def test_the_s3_named_filesystem_leaves_the_registry_alone_and_pickles(obj: str, s3_endpoint: Any) -> None:
    """S3FileSystemAsS3 names itself "s3" for the tools that look (DuckDB) without taking s3:// from others."""
    filesystem = S3FileSystemAsS3(endpoint_url=s3_endpoint.url, max_attempts=2, skip_instance_cache=True)
    try:
        assert filesystem.protocol[0] == "s3"
        assert filesystem.unstrip_protocol(obj) == f"s3://{obj}"
        assert filesystem.cat(f"s3://{obj}") == PAYLOAD
        assert not issubclass(fsspec.get_filesystem_class("s3"), S3FileSystem)
        clone = pickle.loads(pickle.dumps(filesystem))
        assert type(clone) is S3FileSystemAsS3 and clone.policy.max_attempts == 2
        assert clone.cat(obj) == PAYLOAD
    finally:
        filesystem.close()


def test_policy_options_reach_the_policy_and_botocore(s3_endpoint: Any) -> None:
    fs = S3FileSystem(
        endpoint_url=s3_endpoint.url,
        policy={"connectTimeout": "2s", "stall_timeout": "4s"},
        max_attempts=4,
        skip_instance_cache=True,
    )
    try:
        assert fs.policy == Policy.from_env().replace(connect_timeout=2.0, stall_timeout=4.0, max_attempts=4)
        config = fs.s3.meta.config
        assert config.retries["total_max_attempts"] == 1
        assert config.connect_timeout == 2.0
        assert config.read_timeout == 4.0
        assert fs.retries == 1
        assert config.connector_args["socket_factory"] is not None  # TCP_USER_TIMEOUT + keepalive sockets
        assert "max_attempts" not in fs.kwargs  # policy fields are not passed on to botocore
    finally:
        fs.close()


def test_pickled_filesystem_keeps_its_policy(s3_endpoint: Any) -> None:
    fs = S3FileSystem(
        endpoint_url=s3_endpoint.url, policy=Policy(max_attempts=2), stall_timeout=1.5, skip_instance_cache=True
    )
    clone = pickle.loads(pickle.dumps(fs))
    try:
        assert clone is not fs
        assert clone.policy == Policy(max_attempts=2, stall_timeout=1.5)
    finally:
        clone.close()
        fs.close()


def test_options_only_botocore_honours_send_reads_through_botocore(s3_endpoint: Any, obj: str) -> None:
    fs = S3FileSystem(
        endpoint_url=s3_endpoint.url,
        s3_additional_kwargs={"ResponseCacheControl": "no-cache"},
        skip_instance_cache=True,
    )
    try:
        assert not fs.reads_via_s3io
        assert fs.cat_file(obj, start=0, end=8) == PAYLOAD[:8]
        used = fs.stats()
        assert used.requests_for("get_object") == 1
        assert used.requests_for("get") == 0
    finally:
        fs.close()


def test_close_releases_clients_and_the_filesystem_reopens_lazily(fs: S3FileSystem, obj: str) -> None:
    assert fs.cat_file(obj, start=0, end=4) == PAYLOAD[:4]
    assert fs._s3io_clients
    fs.close()
    assert not fs._s3io_clients
    assert fs.stats().requests_for("get") == 1  # counters survive the close
    assert fs.cat_file(obj, start=4, end=8) == PAYLOAD[4:8]
    assert fs.stats().requests_for("get") == 2
    assert obj in fs.ls(os.path.dirname(obj), detail=False, refresh=True)


def test_multipart_write_through_an_open_file(fs: S3FileSystem, bucket: str) -> None:
    data = os.urandom(6 * 2**20)
    with fs.open(f"{bucket}/mpu.bin", "wb", block_size=5 * 2**20) as f:
        f.write(data)
    used = fs.stats()
    assert used.requests_for("create_multipart_upload") == 1
    assert used.requests_for("upload_part") >= 1
    assert used.requests_for("complete_multipart_upload") == 1
    assert fs.cat(f"{bucket}/mpu.bin") == data


def test_asynchronous_filesystem_reads_on_the_callers_loop(s3_endpoint: Any, obj: str) -> None:
    async def main() -> tuple[bytes, list[bytes]]:
        fs = S3FileSystem(endpoint_url=s3_endpoint.url, asynchronous=True, skip_instance_cache=True)
        await fs.set_session()
        try:
            whole = await fs._cat_file(obj)
            ranges = await fs._cat_ranges([obj, obj], [0, 100], [10, 110])
            assert list(fs._s3io_clients) == [asyncio.get_running_loop()]
            return whole, ranges
        finally:
            await fs.aclose()
            assert not fs._s3io_clients

    whole, ranges = asyncio.run(main())
    assert whole == PAYLOAD
    assert ranges == [PAYLOAD[:10], PAYLOAD[100:110]]


@pytest.mark.parametrize(
    ("options", "region", "path_style", "credentials"),
    [
        ({"key": "AKIDEXAMPLE", "secret": "s3cr3t"}, "us-east-1", True, "explicit"),
        ({"anon": True, "client_kwargs": {"region_name": "eu-west-1"}}, "eu-west-1", True, "anonymous"),
        ({"config_kwargs": {"s3": {"addressing_style": "virtual"}}}, "us-east-1", False, "provider-chain"),
    ],
)
def test_s3io_client_takes_endpoint_region_and_credentials_from_storage_options(
    s3_endpoint: Any, options: dict, region: str, path_style: bool, credentials: str
) -> None:
    fs = S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True, **options)

    async def client_description() -> tuple[str, bool, str, str]:
        client = fs._s3io_client()
        try:
            return client.endpoint.region, client.endpoint.path_style, client.endpoint.host, repr(client)
        finally:
            await fs.aclose()

    got_region, got_path_style, host, description = asyncio.run(client_description())
    assert (got_region, got_path_style) == (region, path_style)
    assert host == f"{s3_endpoint.host}:{s3_endpoint.port}"
    assert credentials in description
    assert "s3cr3t" not in description


def test_a_forked_child_refuses_the_parents_instance_and_gets_a_fresh_one(obj: str, s3_endpoint: Any) -> None:
    """As docs/tools/index.md says (and as s3fs does): an instance made before a fork raises in the child; the same
    call there gives a fresh instance that reads; install_as_s3() made in the parent holds in the child."""
    parent = S3FileSystemAsS3(endpoint_url=s3_endpoint.url)
    assert parent.cat(obj) == PAYLOAD
    s3io.fs.install_as_s3()
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(read_end)
                facts: dict[str, Any] = {"registry": fsspec.get_filesystem_class("s3").__name__}
                try:
                    parent.cat(obj)
                    facts["parent_instance"] = "read"
                except RuntimeError as exc:
                    facts["parent_instance"] = str(exc)
                fresh = S3FileSystemAsS3(endpoint_url=s3_endpoint.url)
                facts["fresh_is_parent"] = fresh is parent
                facts["fresh_reads"] = fresh.cat(obj) == PAYLOAD
                os.write(write_end, json.dumps(facts).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        _, status = os.waitpid(pid, 0)
    finally:
        s3io.fs.uninstall_as_s3()
        parent.close()
    assert os.WEXITSTATUS(status) == 0, answer
    assert json.loads(answer) == {
        "registry": "S3FileSystemAsS3",
        "parent_instance": "This class is not fork-safe",
        "fresh_is_parent": False,
        "fresh_reads": True,
    }
