"""The training process's side of the writer: shared-memory slots (``shm.py``) and the
client that starts the writer and talks to it (``client.py``)."""
