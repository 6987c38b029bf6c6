"""Controls and helpers used by several pages: one component or helper each.

``shown`` (the "already shown: no update" checks of every view callback),
``rank_selector`` (the rank selector of the Tensors, Modules, Metrics and Notes pages,
with the one set of rank choice values).
"""
