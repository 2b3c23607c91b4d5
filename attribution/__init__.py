"""ppwtop's pure attribution library: the data model, GPU presets, the engine and the simulator.

Imports nothing from ppwtop, Textual, NVML, CUPTI or torch (checked by import-linter).
"""
