"""The stream's memory of what it accounted for (spark_ext.stream.seen) and the footer record compaction leaves for
it (journal.layout): pure values, no server."""

from __future__ import annotations

import json

import pytest

from s3io.compaction.grouping import FileFacts
from s3io.s3.types import ObjectInfo
from s3io.stream_state.seen import FORMAT, SeenFiles
from s3io.table import layout


def _info(key: str, modified: float = 100.0, etag: str = '"e"') -> ObjectInfo:
    return ObjectInfo("b", key, 10, etag, modified)


def _seen(*keys: str, newest: float = 100.0) -> SeenFiles:
    seen = SeenFiles()
    seen.add([(k, '"e"', newest) for k in keys], 0)
    return seen


def test_each_prefix_has_its_own_high_key_and_a_new_file_stops_it() -> None:
    seen = _seen("in/a/f-1", "in/a/f-2", "in/b/f-1")
    listed = [_info(k) for k in ("in/a/f-1", "in/a/f-2", "in/a/f-3", "in/b/f-1")]  # a/f-3 is new
    seen.advance_high_keys(["in/a/", "in/b/"], listed, max_age=None)
    assert seen.high_keys == {"in/a/": "in/a/f-2", "in/b/": "in/b/f-1"}
    assert seen.start_after("in/a/") == "in/a/f-2" and seen.start_after("in/c/") is None


def test_a_compaction_output_is_passed_over_but_never_becomes_the_high_key() -> None:
    seen = _seen("in/f-1", "in/part-c-job-g0.parquet")
    listed = [_info("in/f-1"), _info("in/part-c-job-g0.parquet")]
    seen.advance_high_keys(["in/"], listed, max_age=None, never={"in/part-c-job-g0.parquet"})
    assert seen.high_keys == {"in/": "in/f-1"}  # a later in/f-2 sorts below part-c-: it must still be listed
    unread = _seen("in/f-1")  # an output not yet read holds the key back like any new file
    unread.advance_high_keys(["in/"], [*listed, _info("in/z-9")], max_age=None, never={"in/part-c-job-g0.parquet"})
    assert unread.high_keys == {"in/": "in/f-1"}


def test_a_file_too_old_to_be_read_does_not_pin_the_high_key() -> None:
    seen = _seen("in/f-2", newest=1_000.0)
    listed = [_info("in/f-1", modified=10.0), _info("in/f-2", modified=1_000.0)]
    seen.advance_high_keys(["in/"], listed, max_age=60.0)
    assert seen.high_keys == {"in/": "in/f-2"}
    seen.advance_high_keys(["in/"], [_info("in/f-3", modified=990.0)], max_age=60.0)  # new and young: stops
    assert seen.high_keys == {"in/": "in/f-2"}


def test_a_checkpoint_of_the_first_version_keeps_its_one_key_for_its_own_prefix_only() -> None:
    body = {"format": FORMAT, "batch": 3, "newest": 5.0, "high_key": "in/b/f-9", "entries": [["in/b/f-9", '"e"', 5.0]]}
    seen = SeenFiles.decode(json.dumps(body).encode())
    assert seen.start_after("in/b/") == "in/b/f-9" and seen.start_after("in/") == "in/b/f-9"
    assert seen.start_after("in/a/") is None  # the old global key said nothing of a/: list it whole
    again = SeenFiles.decode(seen.encode())
    assert again.high_keys == seen.high_keys and again.entries == seen.entries


def test_an_outputs_footer_records_each_original_files_last_modified_in_order() -> None:
    plain = FileFacts(_info("in/f-1", modified=7.0))
    earlier = FileFacts(
        _info("in/part-c-j-g0.parquet", modified=50.0),
        replaces=(("in/f-2", '"a"'), ("in/f-3", '"b"')),
        replaces_modified=(8.0, None),
    )
    legacy = FileFacts(_info("in/part-c-j-g1.parquet"), replaces=(("in/f-4", '"c"'),))  # written before the record
    facts = [plain, earlier, legacy]
    refs = [r for f in facts for r in f.refs()]
    metadata = layout.inputs_metadata(refs, [m for f in facts for m in f.refs_modified()])
    assert layout.inputs_from_metadata(metadata) == [
        ("in/f-1", '"e"'),
        ("in/f-2", '"a"'),
        ("in/f-3", '"b"'),
        ("in/f-4", '"c"'),
    ]
    assert layout.inputs_modified_from_metadata(metadata, 4) == [7.0, 8.0, None, None]
    assert layout.inputs_modified_from_metadata({}, 2) == [None, None]  # an output from before the record
    assert layout.inputs_modified_from_metadata({layout.INPUTS_MODIFIED_METADATA_KEY: b"[1,2]"}, 3) == [None] * 3
    assert layout.inputs_modified_from_metadata({layout.INPUTS_MODIFIED_METADATA_KEY: b"{bad"}, 1) == [None]
    with pytest.raises(ValueError, match="2 Last-Modified values for 1 inputs"):
        layout.inputs_metadata(refs[:1], [1.0, 2.0])


def test_a_file_listed_without_an_etag_is_known_by_its_last_modified() -> None:
    """A store whose listing gives no ETag (the parser allows an empty one): a file already read used to be new at
    every trigger (``same_etag(None, None)`` is false), so a stream read it again each batch and an availableNow
    query never ended (7,230 rows for 30 in the review). Without ETags, another Last-Modified is another version."""
    seen = SeenFiles()
    seen.add([("a", None, 100.0)], 0)
    assert not seen.is_new(ObjectInfo("b", "a", 10, None, 100.0))
    assert seen.is_new(ObjectInfo("b", "a", 10, None, 200.0))  # overwritten
    assert seen.is_new(ObjectInfo("b", "a", 10, '"e"', 100.0))  # the store now names versions: not the one seen
    assert seen.is_new(ObjectInfo("b", "new", 10, None, 100.0))
    seen.add([("c", '"e"', 100.0)], 1)
    assert not seen.is_new(ObjectInfo("b", "c", 10, '"e"', 300.0))  # with ETags, the ETag alone decides
    assert seen.is_new(ObjectInfo("b", "c", 10, '"f"', 100.0))
