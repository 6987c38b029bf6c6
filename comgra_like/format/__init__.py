"""The on-disk contract that the writer process and the readers share.

``layout`` spells out where every file of a group lives. (The schemas, the graph JSON and
the atomic-write primitives move here from ``comgra_like.store`` in the restructure.)
"""
