"""The table layer: a directory of parquet files on S3 as every reader and writer of it must see it.

A directory that compaction (or a writer) touches is correct only for readers that apply its journal, so the
journal's format and read side live here, below every reader: ``data_files`` (which listed objects are data files:
Spark's and Hive's hidden-name rules), ``layout`` (where the lock, the journal, staging and outputs live under a
prefix), ``journal`` (its entries), ``visibility`` (a listing with the journal applied) and ``view`` (the one
function readers call: ``list_visible``). Nothing here imports pyarrow or Spark.
"""

from s3io.table.data_files import ListedFile
from s3io.table.view import PathFiles, is_compaction_output, list_visible

__all__ = ["ListedFile", "PathFiles", "is_compaction_output", "list_visible"]
