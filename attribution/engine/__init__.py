"""The attribution engine: sensor identification, regression over sensor windows, intervals."""
