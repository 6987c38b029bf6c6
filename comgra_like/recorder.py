"""``comgra_like.recorder``: where comgra scripts import the recorder from.

comgra 0.11.5's scripts write ``from comgra.recorder import ComgraRecorder``; with this
tool that line reads ``from comgra_like.recorder import ComgraRecorder``. The recorder
lives in ``comgra_like/record/recorder.py``; this module is its public face.
"""

from .record.recorder import ComgraRecorder

__all__ = ["ComgraRecorder"]
