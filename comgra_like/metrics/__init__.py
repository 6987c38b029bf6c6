"""Per-module metrics (issue 16): the quantities' math (numpy only) and its spectra.

``quantities.py`` defines every built-in quantity (Taiyi's and monitorch's), ``spectra.py``
the covariance spectra that stay affordable on wide layers. The writer process computes
them, so nothing here may import torch.
"""
