"""The installed package (issue 26). Not named ``packaging``: this folder is importable
from tests/, and that name would shadow the ``packaging`` library (transformers imports
it)."""
