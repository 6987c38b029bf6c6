"""The on-disk contract that the writer process and the readers share.

``layout`` spells out where every file of a group lives; ``schema`` and ``notes`` hold
the parquet schemas, ``graphs`` the naming of graph files, ``trial`` the status changes
of trial.json, and ``files`` the filesystem seam every write of the writer goes through
(atomic writes). docs/FORMAT.md is the contract in prose.
"""
