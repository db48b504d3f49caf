"""Base helpers every layer may import: user-facing errors and safe file I/O."""
