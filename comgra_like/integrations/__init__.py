"""Integrations with the loops and tools people already use.

``taiyi.py``: Taiyi's ``Monitor`` (``comgra_like.Monitor``): records per-module metrics
through a recorder and reads them back. Framework callbacks (Lightning, Hugging Face's
Trainer) live beside it, one module per framework; each imports its framework only
inside that module.
"""
