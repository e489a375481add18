"""FilePiece: one unit of reading (a file, or some of its row groups), as planners hand it to ParquetReader."""

from __future__ import annotations

from dataclasses import dataclass

from s3io.s3.types import ObjectInfo


@dataclass(frozen=True, slots=True)
class FilePiece:
    """A file, or some of its row groups, plus the constant (partition) values its rows carry.

    ``obj`` comes from the listing: its size saves a HEAD and its ETag pins every GET with If-Match.
    ``row_groups`` None means all row groups (still pruned by predicates); ``partition_values`` are
    appended as constant columns, in the order of the reader's ``partition_schema``.
    """

    obj: ObjectInfo
    row_groups: tuple[int, ...] | None = None
    partition_values: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        if self.row_groups is not None:
            object.__setattr__(self, "row_groups", tuple(self.row_groups))
        object.__setattr__(self, "partition_values", tuple(self.partition_values))

    @property
    def url(self) -> str:
        return self.obj.url

    def __reduce__(self) -> tuple[type, tuple[ObjectInfo, tuple[int, ...] | None, tuple[object, ...]]]:
        # Every task's InputPartition carries its pieces pickled (see ObjectInfo.__reduce__).
        return FilePiece, (self.obj, self.row_groups, self.partition_values)
