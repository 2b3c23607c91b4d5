"""Live collectors: the only modules that import pynvml / cupti."""
