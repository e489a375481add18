"""The dataset layer between the range engine + parquet layer and the APIs (standalone and Spark).

``FilePiece`` names what to read (a file or some of its row groups, plus partition values); ``ParquetReader``
reads footers, schemas and record batches of many pieces concurrently within the engine's memory budget.
"""

from s3io.dataset.parquet_reader import ParquetReader, ReaderStats
from s3io.dataset.pieces import FilePiece

__all__ = ["FilePiece", "ParquetReader", "ReaderStats"]
