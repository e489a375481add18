"""The table layer: a directory of parquet files on S3 as every reader and writer of it must see it, and the
transactions that change it.

A directory that a compaction or a writer touches is correct only for readers that apply its journal, so the
journal's format and read side live here, below every reader: ``data_files`` (which listed objects are data files:
Spark's and Hive's hidden-name rules), ``layout`` (where the control folder ``_s3io_table/``, staging and outputs
live under a prefix), ``journal`` (its entries, of both kinds: a compaction group's and a write's), ``conditional``
(writes that stay correct when a retry follows a lost answer, and the guard of a data file's delete),
``visibility`` (a listing with the journal applied) and ``view`` (the one function readers call: ``list_visible``;
``list_directory`` for a walk of partition directories). The writer (s3io.write) and compaction (s3io.compaction)
build on the same transactions side by side: ``store_check`` (the store probe's verdict, refused where the lock and
journal cannot hold), ``lease`` and ``lock`` (the table's lock, a lease judged on the store's clock),
``transaction`` (a committed group's steps to the end), ``write_protocol`` (a write's steps), ``recovery`` (what a
dead job of either kind left) and ``crash`` (the crash points of both protocols, for tests). Nothing here imports
pyarrow or Spark.
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
    "logical_key",
    "read_journal",
    "read_journal_before",
    "resolve_visible_files",
]
