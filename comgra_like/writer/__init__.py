"""The writer: the only writer of a trial folder. It runs as a process of its own (or a
thread of the training process), takes the messages of one recorder and turns them into
the files of :mod:`comgra_like.format`. No torch is imported here.

Nothing is imported on ``import comgra_like.writer``: the training process imports the
protocol module alone.
"""
