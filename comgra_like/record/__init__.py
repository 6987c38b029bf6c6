"""The training process's side of recording, below the ``ComgraRecorder`` facade.

``step`` holds the step being recorded (registrations, lookups, connections, gradient
bookkeeping), ``graph`` extracts dependency-graph structures from autograd, ``capture``
copies tensors into the transport's shared memory and composes the step's message, and
``kpi`` thins KPI curves. Drivers (``comgra_like.recorder.ComgraRecorder``, module hooks)
feed a ``Step`` through its public methods.
"""
