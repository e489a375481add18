"""The table layer: a directory of parquet files on S3 as every reader and writer of it must see it.

A directory that compaction (or a writer) touches is correct only for readers that apply its journal, so the
journal's format and read side live here, below every reader: ``data_files`` (which listed objects are data files:
Spark's and Hive's hidden-name rules), ``layout`` (where the lock, the journal, staging and outputs live under a
prefix), ``journal`` (its entries: their format, reads and the compaction's conditional writes), ``conditional``
(writes that stay correct when a retry follows a lost answer), ``visibility`` (a listing with the journal applied)
and ``view`` (the one function readers call: ``list_visible``; ``list_directory`` for a walk of partition
directories). Nothing here imports pyarrow or Spark.
"""

from s3io.table.data_files import ListedFile
from s3io.table.journal import JournalEntry, ObjectRef, read_journal
from s3io.table.layout import logical_key
from s3io.table.view import (
    DirectoryListing,
    Narrowed,
    Narrowing,
    PathFiles,
    is_compaction_output,
    list_directory,
    list_visible,
)
from s3io.table.visibility import (
    JournalSnapshot,
    apply_journal,
    list_visible_files,
    read_journal_before,
    resolve_visible_files,
)

__all__ = [
    "DirectoryListing",
    "JournalEntry",
    "JournalSnapshot",
    "ListedFile",
    "Narrowed",
    "Narrowing",
    "ObjectRef",
    "PathFiles",
    "apply_journal",
    "is_compaction_output",
    "list_directory",
    "list_visible",
    "list_visible_files",
    "logical_key",
    "read_journal",
    "read_journal_before",
    "resolve_visible_files",
]
