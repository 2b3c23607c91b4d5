"""Fakes of the GPU bindings at their lowest boundary, so the real wrapper code runs in tests.

``nvml_lib`` is a stand-in for ``libnvidia-ml.so`` assigned to ``pynvml.nvmlLib`` (answering from an
``nvml_board`` model); ``cupti_lib`` stands in for libcupti.  pynvml's own
ctypes wrappers then call it unchanged.  The fakes are driven by a board model (true power over
time plus the sensor's period, window and lag), not by canned answers.
"""
