"""The compaction journal as every reader and writer of a prefix sees it, apart from the compaction job itself.

``layout`` (where the lock, the journal, staging and outputs live under a prefix), ``entries`` (journal entries and
reading them) and ``visibility`` (what a journal-aware reader of a prefix reads, whatever a compaction is doing).
The batch source and the stream import only this; the compaction (spark_ext.compact) writes the journal.
"""
