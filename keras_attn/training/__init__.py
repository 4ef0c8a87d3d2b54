"""Training helpers: callbacks and distribution."""
