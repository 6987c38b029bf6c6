"""Integrations with the loops and tools people already use.

``taiyi.py``: Taiyi's ``Monitor`` (``comgra_like.Monitor``): records per-module metrics
through a recorder and reads them back. Framework callbacks live beside it, one module
per framework, each importing its framework only inside that module (docs/INTEGRATIONS.md):
``lightning.py`` and ``pytorch_lightning.py`` (Lightning's ``ComgraCallback`` on either
package's ``Callback``; the body is ``lightning_callback.py``), ``huggingface.py`` (the
Trainer's), and ``callbacks.py``, what they share.
"""
