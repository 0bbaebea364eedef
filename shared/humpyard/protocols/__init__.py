"""Client and upstream wire formats: pure encode/decode functions, no I/O."""
