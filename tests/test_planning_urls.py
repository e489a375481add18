"""Paths and globs: parsing, listing prefixes, matching, and the selection of data files from a listing."""

from __future__ import annotations

import pickle

import pytest

from s3io.dataset.pieces import FilePiece
from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from s3io.table.data_files import ListedFile, listing_columns, listing_from_columns, select_files
from s3io.urls import compile_name_glob, has_glob, parse_paths, parse_s3_url


@pytest.mark.parametrize(
    ("url", "bucket", "key"),
    [
        ("s3://b/t/", "b", "t/"),
        ("s3a://my-bucket/a/b", "my-bucket", "a/b"),
        ("s3n://b.c/x", "b.c", "x"),
        ("S3A://b/x", "b", "x"),
        ("s3://b", "b", ""),
        ("s3://b/", "b", ""),
        ("s3://b/a b/c#d", "b", "a b/c#d"),  # keys are literal: no query, fragment or percent-decoding
        ("s3://b/a%20b", "b", "a%20b"),
    ],
)
def test_parse_accepts_s3_s3a_s3n(url: str, bucket: str, key: str) -> None:
    path = parse_s3_url(url)
    assert (path.bucket, path.key, path.is_glob) == (bucket, key, False)
    assert path.url == f"s3://{bucket}/{key}"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("bucket/key", "has no scheme; expected s3://bucket/prefix"),
        ("/local/dir", "has no scheme"),
        ("hdfs://nn/x", "scheme 'hdfs://' .* is not supported; expected s3://bucket/prefix"),
        ("file:///tmp/x", "scheme 'file://'"),
        ("s3:///key", "empty bucket name; expected s3://bucket/prefix"),
        ("s3://", "empty bucket name"),
        ("s3:/b/key", "malformed; expected s3://bucket/prefix"),
        ("s3://b*/key", "not a valid bucket name"),
    ],
)
def test_bad_urls_say_the_accepted_form(url: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        parse_s3_url(url)


def test_credentials_in_urls_are_refused_without_echoing_them() -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_s3_url("s3n://AKIA:s3cr3t@bucket/key")
    assert "s3cr3t" not in str(info.value) and "accessKeyId" in str(info.value)


def test_several_paths_name_the_failing_one() -> None:
    with pytest.raises(InvalidConfig, match=r"paths\[1\]"):
        parse_paths(["s3://b/x", "gs://b/y"])
    assert [p.key for p in parse_paths(["s3://b/x", "s3://c/y"])] == ["x", "y"]


@pytest.mark.parametrize(
    ("url", "prefixes"),
    [
        ("s3://b/t/", ("t/",)),
        ("s3://b/t", ("t",)),
        ("s3://b", ("",)),
        ("s3://b/t/year=202*/", ("t/year=202",)),
        ("s3://b/t/*/x", ("t/",)),
        ("s3://b/t/{a,b}/x", ("t/a/x", "t/b/x")),
        ("s3://b/{x,y/z}/*.parquet", ("x/", "y/z/")),
        ("s3://b/t/{a,ab}*", ("t/a",)),
        ("s3://b/t/a\\*b/", ("t/a*b/",)),
    ],
)
def test_listing_prefixes_are_the_literal_starts(url: str, prefixes: tuple[str, ...]) -> None:
    assert parse_s3_url(url).listing_prefixes == prefixes


@pytest.mark.parametrize(
    ("url", "key", "root", "relative"),
    [
        ("s3://b/t/", "t/a=1/f.parquet", "t/", "a=1/f.parquet"),
        ("s3://b/t", "t/f.parquet", "t/", "f.parquet"),
        ("s3://b/t", "t", "", ""),  # the path names a file: its parent is the root
        ("s3://b", "f.parquet", "", "f.parquet"),
        ("s3://b/t/year=*/", "t/year=2020/m=1/f", "t/year=2020/", "year=2020/m=1/f"),
        ("s3://b/t/*.parquet", "t/f.parquet", "t/", "f.parquet"),
        ("s3://b/t/{a,b}/", "t/b/f", "t/b/", "f"),
        ("s3://b/t/[0-9]?/", "t/1x/f", "t/1x/", "1x/f"),
        ("s3://b/t/[!0-9]*/", "t/x/f", "t/x/", "x/f"),
        ("s3://b/t/{a,{b,c}d}/", "t/cd/f", "t/cd/", "f"),
    ],
)
def test_match_gives_root_and_relative(url: str, key: str, root: str, relative: str) -> None:
    match = parse_s3_url(url).match(key)
    assert match is not None and (match.root, match.relative) == (root, relative)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("s3://b/t", "t2/f"),
        ("s3://b/t/", "t"),  # a trailing "/" names a directory, never a file
        ("s3://b/t/year=*/", "t/year=2020"),
        ("s3://b/t/*.parquet", "t/x/f.parquet"),  # "*" stays within one segment
        ("s3://b/t/[0-9]/", "t/x/f"),
        ("s3://b/t/{a,b}/", "t/c/f"),
        ("s3://b/t/a\\*b/", "t/axb/f"),
    ],
)
def test_match_rejects(url: str, key: str) -> None:
    assert parse_s3_url(url).match(key) is None


@pytest.mark.parametrize(
    ("glob", "message"),
    [("t/[abc", "unclosed or empty character class"), ("t/{a,b", "unclosed '\\{'"), ("t/x\\", "lone")],
)
def test_bad_globs_are_explained(glob: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        parse_s3_url(f"s3://b/{glob}")


def test_brace_explosion_is_bounded() -> None:
    with pytest.raises(InvalidConfig, match="more than 1024 alternatives"):
        parse_s3_url("s3://b/" + "{a,b}" * 11)


def test_paths_are_picklable() -> None:
    path = parse_s3_url("s3a://b/t/year=20[12]?/m={1,2}/")
    clone = pickle.loads(pickle.dumps(path))
    assert clone == path and clone.match("t/year=2021/m=2/f") == path.match("t/year=2021/m=2/f")


def test_name_glob_and_has_glob() -> None:
    accepts = compile_name_glob("*.{parquet,pq}")
    assert accepts("a.parquet") and accepts("a.pq") and not accepts("a.csv") and not accepts("x.parquet.crc")
    assert has_glob("a*") and has_glob("{a}") and not has_glob("a\\*") and not has_glob("a]")


def _objects(*keys: str, bucket: str = "b") -> list[ObjectInfo]:
    return [ObjectInfo(bucket, k, 10) for k in keys]


def test_select_files_drops_hidden_markers_and_other_paths() -> None:
    objects = _objects(
        "t/a=1/f.parquet",
        "t/a=1/_SUCCESS",
        "t/_temporary/0/x.parquet",
        "t/a=1/.f.parquet.crc",
        "t/a=2/",
        "t/_c=1/g.parquet",
        "t2/other.parquet",
        "t/a=1/f.parquet",  # overlapping listings
    ) + _objects("t/z.parquet", bucket="other")
    selected = select_files(objects, parse_s3_url("s3://b/t"))
    assert [(f.info.key, f.root) for f in selected] == [
        ("t/_c=1/g.parquet", "s3://b/t/"),
        ("t/a=1/f.parquet", "s3://b/t/"),
    ]


def test_select_files_keeps_a_literally_named_hidden_file() -> None:
    selected = select_files(_objects("t/_x.parquet"), parse_s3_url("s3://b/t/_x.parquet"))
    assert [(f.info.key, f.root) for f in selected] == [("t/_x.parquet", "s3://b/t/")]


def test_select_files_applies_hidden_rule_to_wildcard_matched_directories() -> None:
    objects = _objects("t/2020/f.parquet", "t/_temporary/f.parquet", "t/.staging/f.parquet")
    selected = select_files(objects, parse_s3_url("s3://b/t/*/"))
    assert [(f.info.key, f.root) for f in selected] == [("t/2020/f.parquet", "s3://b/t/2020/")]


def test_path_glob_filter_looks_at_file_names_only() -> None:
    objects = _objects("t/a=1.parquet/f.parquet", "t/a=2/f.csv", "t/a=3/g.parquet")
    selected = select_files(objects, parse_s3_url("s3://b/t/"), path_glob_filter="*.parquet")
    assert [f.info.key for f in selected] == ["t/a=1.parquet/f.parquet", "t/a=3/g.parquet"]


def test_a_listing_survives_pickling_as_objects_and_as_columns() -> None:
    files = (
        ListedFile(ObjectInfo("b", "t/x=1/a.parquet", 10, '"e1"', 1.5), "s3://b/t/"),
        ListedFile(ObjectInfo("b", "t/_staging/o.parquet", 0, None, None), "s3://b/t/", "t/o.parquet", False),
    )
    assert pickle.loads(pickle.dumps(files)) == files
    assert listing_from_columns(pickle.loads(pickle.dumps(listing_columns(files)))) == files
    assert listing_from_columns(listing_columns(())) == ()
    piece = FilePiece(files[0].info, (0, 2), ("a", 1))
    assert pickle.loads(pickle.dumps(piece)) == piece
