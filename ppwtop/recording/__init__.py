"""The .ppw recording format."""
